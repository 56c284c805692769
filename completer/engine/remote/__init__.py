"""The remote backend: the model in an OpenAI-compatible inference server (``vllm serve``), the language server
next to the editor (``engine.RemoteEngine``); replica affinity (``affinity``); the server's command line from the
project's settings (``serve``)."""
