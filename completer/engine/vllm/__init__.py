"""The vLLM backend: an in-process AsyncLLM (``VLLMEngine``). Importing this package does not import vLLM."""
