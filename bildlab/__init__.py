"""bildlab: the Big Little Decoder and speculative decoding over unmodified Hugging Face models."""

from .decoding import METHODS, Output, generate

__version__ = "0.1.0"
__all__ = ["METHODS", "Output", "generate", "__version__"]
