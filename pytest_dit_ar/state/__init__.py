"""The state layer: files under `.autoresearch/`, the ledger, the best commit, integrity snapshots and git."""
