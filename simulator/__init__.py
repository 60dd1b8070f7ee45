"""servesim: a discrete-event simulator of LLM inference serving with vLLM V1 scheduling."""

__version__ = "0.2.0"
