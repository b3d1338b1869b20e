"""The Docker engine: the one module that runs its verbs, the labels the lab puts on what it
makes, and what it leaves behind."""
