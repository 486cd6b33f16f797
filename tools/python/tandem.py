"""Tandem from Python: a thin ctypes binding over the C API (libtandem.so,
runtime/serving/tandem.h), nothing more.

    import tandem
    with tandem.Model("model.gguf", n_seq=2) as m:
        print(m.generate("The capital of France is", max_tokens=16))
        v = m.embed("A sentence to embed", pooling="mean")  # unit length

Several threads may call generate() on one Model at once: up to n_seq
generations share each pass over the weights. Errors raise tandem.Error
with the library's one-line message.

The library is found at $TANDEM_LIBRARY, else as libtandem.so on the
loader's path. It is loaded with RTLD_GLOBAL, which the CUDA plugin needs.
"""
import ctypes
import os

__all__ = ["Error", "Model", "Result"]


class Error(RuntimeError):
    pass


class _OpenParams(ctypes.Structure):
    _fields_ = [("model_path", ctypes.c_char_p), ("n_ctx", ctypes.c_int32), ("n_seq", ctypes.c_int32),
                ("n_threads", ctypes.c_int32), ("n_gpu_layers", ctypes.c_int32), ("device", ctypes.c_char_p),
                ("vram_bytes", ctypes.c_uint64)]


class _GenerateParams(ctypes.Structure):
    _fields_ = [("max_tokens", ctypes.c_int32), ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float),
                ("seed", ctypes.c_uint64), ("ignore_eos", ctypes.c_int32), ("cache_prompt", ctypes.c_int32),
                ("add_bos", ctypes.c_int32)]


class _EmbedParams(ctypes.Structure):
    _fields_ = [("pooling", ctypes.c_char_p), ("normalize", ctypes.c_int32), ("add_bos", ctypes.c_int32)]


class _Result(ctypes.Structure):
    _fields_ = [("sequence", ctypes.c_int32), ("prompt_tokens", ctypes.c_int32), ("cached_tokens", ctypes.c_int32),
                ("completion_tokens", ctypes.c_int32), ("finish_reason", ctypes.c_char * 16)]


_TextCallback = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t, ctypes.c_void_p)


def _load():
    lib = ctypes.CDLL(os.environ.get("TANDEM_LIBRARY", "libtandem.so"), mode=ctypes.RTLD_GLOBAL)
    sig = {
        "tandem_open_params_default": ([], _OpenParams),
        "tandem_generate_params_default": ([], _GenerateParams),
        "tandem_open": ([ctypes.POINTER(_OpenParams)], ctypes.c_void_p),
        "tandem_close": ([ctypes.c_void_p], None),
        "tandem_last_error": ([], ctypes.c_char_p),
        "tandem_n_ctx": ([ctypes.c_void_p], ctypes.c_int32),
        "tandem_n_seq": ([ctypes.c_void_p], ctypes.c_int32),
        "tandem_n_vocab": ([ctypes.c_void_p], ctypes.c_int32),
        "tandem_n_embd": ([ctypes.c_void_p], ctypes.c_int32),
        "tandem_embed_params_default": ([], _EmbedParams),
        "tandem_embed": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_EmbedParams),
                          ctypes.POINTER(ctypes.c_float), ctypes.c_int32], ctypes.c_int32),
        "tandem_embed_tokens": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                 ctypes.POINTER(_EmbedParams), ctypes.POINTER(ctypes.c_float), ctypes.c_int32],
                                ctypes.c_int32),
        "tandem_tokenize": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                             ctypes.c_int32], ctypes.c_int32),
        "tandem_generate": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_GenerateParams), _TextCallback,
                             ctypes.c_void_p, ctypes.POINTER(_Result)], ctypes.c_int32),
        "tandem_save_sequence": ([ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int64),
        "tandem_restore_sequence": ([ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t],
                                    ctypes.c_int32),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib


_lib = None


def _c():
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def _fail():
    raise Error(_c().tandem_last_error().decode("utf-8", "replace"))


class Result:
    """What one generate_full() call produced."""

    def __init__(self, text, r):
        self.text = text
        self.sequence = r.sequence
        self.prompt_tokens = r.prompt_tokens
        self.cached_tokens = r.cached_tokens
        self.completion_tokens = r.completion_tokens
        self.finish_reason = r.finish_reason.decode()


class Model:
    def __init__(self, path, n_ctx=0, n_seq=1, n_threads=0, n_gpu_layers=-1, device=None, vram_bytes=0):
        p = _c().tandem_open_params_default()
        p.model_path = os.fsencode(path)
        p.n_ctx, p.n_seq, p.n_threads, p.n_gpu_layers = n_ctx, n_seq, n_threads, n_gpu_layers
        p.device = device.encode() if device else None
        p.vram_bytes = vram_bytes
        self._m = _c().tandem_open(ctypes.byref(p))
        if not self._m:
            _fail()

    def close(self):
        if self._m:
            _c().tandem_close(self._m)
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def n_ctx(self):
        return _c().tandem_n_ctx(self._m)

    @property
    def n_seq(self):
        return _c().tandem_n_seq(self._m)

    @property
    def n_embd(self):
        return _c().tandem_n_embd(self._m)

    def embed(self, input, pooling="mean", normalize=2, add_bos=True):
        """The embedding of input (text, or a list of token ids) as a list
        of n_embd floats: the final hidden states pooled ("mean", "cls" or
        "last") and normalized as llama.cpp's --embd-normalize (2: unit
        length; -1: none; 0: int16's range; p >= 1: the p-norm)."""
        p = _c().tandem_embed_params_default()
        pooling_bytes = pooling.encode() if isinstance(pooling, str) else pooling
        p.pooling, p.normalize, p.add_bos = pooling_bytes, normalize, int(add_bos)
        out = (ctypes.c_float * max(self.n_embd, 0))()
        if isinstance(input, str):
            n = _c().tandem_embed(self._m, input.encode(), ctypes.byref(p), out, len(out))
        else:
            ids = (ctypes.c_int32 * len(input))(*input)
            n = _c().tandem_embed_tokens(self._m, ids, len(ids), ctypes.byref(p), out, len(out))
        if n < 0:
            _fail()
        return list(out[:n])

    def tokenize(self, text, add_bos=True):
        data = text.encode()
        n = _c().tandem_tokenize(self._m, data, int(add_bos), None, 0)
        if n < 0:
            _fail()
        out = (ctypes.c_int32 * n)()
        if _c().tandem_tokenize(self._m, data, int(add_bos), out, n) != n:
            _fail()
        return list(out)

    def generate_full(self, prompt, max_tokens=128, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05,
                      repeat_penalty=1.0, seed=0, ignore_eos=False, cache_prompt=True, add_bos=True, on_text=None):
        """The completion of prompt, as a Result. on_text(piece) sees each
        piece as it comes; a true return stops the generation."""
        g = _c().tandem_generate_params_default()
        g.max_tokens, g.temperature, g.top_k, g.top_p, g.min_p = max_tokens, temperature, top_k, top_p, min_p
        g.repeat_penalty, g.seed, g.ignore_eos = repeat_penalty, seed, int(ignore_eos)
        g.cache_prompt, g.add_bos = int(cache_prompt), int(add_bos)
        pieces = []

        def take(data, length, _user):
            pieces.append(ctypes.string_at(data, length))
            return 1 if on_text is not None and on_text(pieces[-1].decode("utf-8", "replace")) else 0

        r = _Result()
        if _c().tandem_generate(self._m, prompt.encode(), ctypes.byref(g), _TextCallback(take), None,
                                ctypes.byref(r)) != 0:
            _fail()
        return Result(b"".join(pieces).decode("utf-8", "replace"), r)

    def generate(self, prompt, **kwargs):
        """The completion of prompt, as text (generate_full's arguments)."""
        return self.generate_full(prompt, **kwargs).text

    def save_sequence(self, sequence):
        """A free sequence's state, as bytes."""
        n = _c().tandem_save_sequence(self._m, sequence, None, 0)
        if n < 0:
            _fail()
        buf = (ctypes.c_uint8 * n)()
        if _c().tandem_save_sequence(self._m, sequence, buf, n) != n:
            _fail()
        return bytes(buf)

    def restore_sequence(self, sequence, state):
        """Replaces a free sequence's state; returns the tokens it holds."""
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        n = _c().tandem_restore_sequence(self._m, sequence, buf, len(state))
        if n < 0:
            _fail()
        return n
