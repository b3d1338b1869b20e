"""What reads finished runs: reports, comparisons, benchmarks, the upgrade matrix and TensorBoard."""
