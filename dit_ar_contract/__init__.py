"""The ground of pytest-dit-ar: the typed session contract, device identity, exit codes and the status
vocabulary. It imports nothing else of this project; every other package may import it."""
