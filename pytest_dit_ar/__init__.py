"""pytest-dit-ar: a keep/discard research loop for Diffusion Transformer inference speed."""

__version__ = "0.1.0"
