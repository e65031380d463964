"""The `dit-ar` command: parse what the user asked, call the layer that does it, print, set the exit code."""
