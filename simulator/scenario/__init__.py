"""What a scenario is: its fields and checks, the model, the GPU, the vLLM release line and the KV pool it gets."""
