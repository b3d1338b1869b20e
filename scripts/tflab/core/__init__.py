"""What the host and the trainer share: settings, the cluster, the task contract, the run folder,
foreign input, explanations. Imports nothing of the lab outside core/ (test_walls holds it)."""
