"""A run from start to end: the supervisor, the user's script, resumes, preemption notices, the
audit's findings and the summary."""
