"""ojas.io: safetensors files with the names of the safetensors package
(save_file, load_file), over include/ojas/io.h: writes are atomic (a
reader sees the old file or the whole new one); loads on a CPU engine are
zero-copy views of the mapped file (writes to them never reach the file)."""
from ojas import _C


def save_file(tensors, filename, metadata=None):
    """Write a dict name -> Tensor (any engine, any strides) to filename;
    metadata: a dict of str -> str."""
    names = list(tensors)
    pairs = []
    for k, v in (metadata or {}).items():
        pairs += [str(k), str(v)]
    _C.safetensors_save(str(filename), names, [tensors[n] for n in names], pairs)


def load_file(filename, engine=None):
    """A dict name -> Tensor of every tensor of filename, on engine (default:
    the default engine)."""
    return _C.safetensors_load(str(filename), engine)[0]


def load_metadata(filename):
    """The file's __metadata__ as a dict."""
    return _C.safetensors_load(str(filename))[1]
