"""The SGLang site's sitecustomize (device.sh sginstall copies it there): SGLang 0.5.16 registers configs that the
image's transformers (5.17) already has (qwen3_asr), which raises; registering lets the newer one stand."""

try:
    from transformers.models.auto import auto_factory, configuration_auto

    def _keep(register):
        def wrapped(self, key, value, exist_ok=False):
            return register(self, key, value, exist_ok=True)

        return wrapped

    configuration_auto._LazyConfigMapping.register = _keep(configuration_auto._LazyConfigMapping.register)
    auto_factory._LazyAutoMapping.register = _keep(auto_factory._LazyAutoMapping.register)
except Exception:  # no transformers: nothing to patch
    pass
