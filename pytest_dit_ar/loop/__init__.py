"""The loop: the verbs (baseline, experiment, revalidate, init), the one verdict, and the rooms they compose."""
