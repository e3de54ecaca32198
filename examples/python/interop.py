"""ojas beside numpy and PyTorch: shared memory, zero-copy DLPack, and the
same gradients.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/interop.py

Each step prints what it shows and checks it (an AssertionError otherwise).
"""
import numpy as np
import torch
import torch.utils.dlpack

import ojas


def main():
    # numpy -> ojas: from_numpy shares the array's memory
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ojas.from_numpy(a)
    a[0, 0] = 100.0
    assert t[0, 0].item() == 100.0
    print("from_numpy shares memory:      a[0,0] = 100 is seen by the tensor")

    # ojas -> numpy: .numpy() is a view of the tensor
    v = t.numpy()
    assert v.ctypes.data == t.data_ptr()
    print("Tensor.numpy() is a view:      same address 0x%x" % t.data_ptr())
    del v

    # ojas -> torch and back through DLPack, without copies
    tt = torch.utils.dlpack.from_dlpack(t)
    assert tt.data_ptr() == t.data_ptr()
    back = ojas.from_dlpack(tt)
    assert back.data_ptr() == t.data_ptr()
    tt.mul_(2)  # torch writes, ojas sees it
    assert t[0, 0].item() == 200.0
    print("DLPack round trip ojas->torch->ojas: one buffer, torch's in-place x2 seen by ojas")
    del tt, back

    # the same computation and gradients on both sides
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 5)).astype(np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    ox, ow = ojas.tensor(x, requires_grad=True), ojas.tensor(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    oy = ojas.nn.functional.gelu(ox @ ow).log_softmax(-1).sum()
    ty = torch.nn.functional.gelu(tx @ tw).log_softmax(-1).sum()
    oy.backward()
    ty.backward()
    np.testing.assert_allclose(oy.item(), ty.item(), rtol=1e-5)
    np.testing.assert_allclose(ow.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
    print("gelu(x @ w).log_softmax(-1).sum(): value %.5f and dL/dw agree with torch" % oy.item())

    # a torch model's weights into ojas, zero-copy, and the same output
    lin = torch.nn.Linear(5, 3)
    with torch.no_grad():
        W = ojas.from_dlpack(lin.weight.detach())
        b = ojas.from_dlpack(lin.bias.detach())
        out = ojas.nn.functional.linear(ojas.from_numpy(x), W, b)
        np.testing.assert_allclose(out.numpy(), lin(torch.from_numpy(x)).numpy(), rtol=1e-5,
                                   atol=1e-6)
    print("torch.nn.Linear's weights used by ojas through DLPack: same output")


if __name__ == "__main__":
    main()
