"""Guards: what an experiment checks before and around its run: session, scope, pre-gate, test selection, locks."""
