"""onnx_check.py - the checks of tests/cli_onnx.sh, by tools that are not ours.

    onnx_check.py FORWARD RUN KIND MODEL.onnx [--opencv-tol T]

1. onnx.checker.check_model(full_check=True) (Debian's python3-onnx): the model is valid ONNX
   and its shapes infer.
2. Random inputs (seeded) go through three evaluators:
   - ours: FORWARD (tests/onnx_forward.c), the run loaded as `replicator eval` / `sample` load
     it, in our layouts (NHWC images, class indices);
   - OpenCV's dnn module (python3-opencv, cv2.dnn.readNetFromONNX) on the ONNX model, in its
     layouts (NCHW, one-hot class);
   - a float64 evaluator of the ONNX graph written here from the operators' definitions.
   Each must be within TOL x scale of the float64 result, scale being the output's: the
   largest |logit| of a classifier, 1 for the generator's tanh image and the policy's actions
   (bounded by 1). TOL is 1e-5 for ours and for OpenCV (--opencv-tol raises it for OpenCV
   alone: OpenCV 4.6's Winograd convolution, used for 3x3 convolutions on inputs of 12 x 12 or
   more, is off by about 6e-5 on a 224 x 224 ResNet-18, and its f32 sums over an MLP's 150,528
   inputs by 1.5e-4; docs/export.md).
Prints one line of measured errors; exits 1 on any failure.
"""
import subprocess
import sys
import tempfile

import cv2
import numpy as np
import onnx
from onnx import numpy_helper


def conv(x, w, b, strides, pads):
    n, c, h, wd = x.shape
    k, s, p = w.shape[2], strides[0], pads[0]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
    cols = np.empty((n, c, k, k, oh, ow))
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + s * oh:s, j:j + s * ow:s]
    y = np.einsum("nckluv,ockl->nouv", cols, w, optimize=True)
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def reference(model, feeds):
    """The graph evaluated in float64, operator by operator (only the ones the exporters use)."""
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in env.items()}
    env.update({k: v.astype(np.float64) for k, v in feeds.items()})
    for nd in model.graph.node:
        a = {t.name: onnx.helper.get_attribute_value(t) for t in nd.attribute}
        i = [env[n] if n else None for n in nd.input]
        op = nd.op_type
        if op == "Conv":
            y = conv(i[0], i[1], i[2] if len(i) > 2 else None, a["strides"], a["pads"])
        elif op == "BatchNormalization":
            sh = (1, -1) + (1,) * (i[0].ndim - 2)
            y = ((i[0] - i[3].reshape(sh)) / np.sqrt(i[4].reshape(sh) + a["epsilon"]) *
                 i[1].reshape(sh) + i[2].reshape(sh))
        elif op in ("Add", "Sub", "Mul", "Div", "MatMul"):
            y = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                 "MatMul": np.matmul}[op](i[0], i[1])
        elif op in ("Relu", "Tanh", "Sqrt", "Identity"):
            y = {"Relu": lambda v: np.maximum(v, 0), "Tanh": np.tanh, "Sqrt": np.sqrt,
                 "Identity": lambda v: v}[op](i[0])
        elif op == "Elu":
            y = np.where(i[0] > 0, i[0], a.get("alpha", 1.0) * np.expm1(np.minimum(i[0], 0)))
        elif op == "Reshape":
            y = i[0].reshape([int(d) for d in i[1]])
        elif op == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        elif op == "GlobalAveragePool":
            y = i[0].mean(axis=(2, 3), keepdims=True)
        elif op == "Gemm":
            y = i[0] @ (i[1].T if a.get("transB") else i[1]) + (i[2] if len(i) > 2 else 0)
        elif op == "Resize":  # nearest, integer scales: each pixel repeated
            assert a.get("mode") == b"nearest", a
            fy, fx = int(i[2][2]), int(i[2][3])
            assert fy == i[2][2] and fx == i[2][3] and i[2][0] == i[2][1] == 1, i[2]
            y = i[0].repeat(fy, 2).repeat(fx, 3)
        elif op == "MaxPool":
            k, s, p = a["kernel_shape"][0], a["strides"][0], a["pads"][0]
            xp = np.pad(i[0], ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
            n, c, h, w = i[0].shape
            oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            y = np.full((n, c, oh, ow), -np.inf)
            for u in range(k):
                for v in range(k):
                    y = np.maximum(y, xp[:, :, u:u + s * oh:s, v:v + s * ow:s])
        else:
            raise SystemExit(f"no float64 reference for {op}")
        env[nd.output[0]] = y
    return env[model.graph.output[0].name]


def dims(value):
    return [d.dim_value if d.HasField("dim_value") else None
            for d in value.type.tensor_type.shape.dim]


def main():
    forward, run, kind, path = sys.argv[1:5]
    cv_tol = float(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[5] == "--opencv-tol" else 1e-5
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 13 and model.ir_version >= 7, model.opset_import
    rng = np.random.default_rng(7)
    n = 3
    tmp = tempfile.mkdtemp()
    shape = [n] + dims(model.graph.input[0])[1:]
    if kind == "classifier":
        x = rng.random(shape, dtype=np.float32)  # pixel / 255
        feeds = {"image": x}
        x.transpose(0, 2, 3, 1).tofile(f"{tmp}/in")  # ours: NHWC
        args = [f"{tmp}/in", f"{tmp}/out"]
    elif kind == "sngan":
        classes = dims(model.graph.input[1])[1]
        z = rng.standard_normal(shape, dtype=np.float32)
        labels = rng.integers(0, classes, n).astype(np.int32)
        feeds = {"z": z, "class": np.eye(classes, dtype=np.float32)[labels]}
        z.tofile(f"{tmp}/z")
        labels.tofile(f"{tmp}/labels")
        args = [f"{tmp}/z", f"{tmp}/labels", f"{tmp}/out"]
    else:
        obs = rng.standard_normal(shape, dtype=np.float32)
        feeds = {"observation": obs}
        obs.tofile(f"{tmp}/in")
        args = [f"{tmp}/in", f"{tmp}/out"]
    subprocess.run([forward, run, kind] + args, check=True, stdout=subprocess.DEVNULL)
    out_shape = [n] + dims(model.graph.output[0])[1:]
    ours = np.fromfile(f"{tmp}/out", np.float32)
    if kind == "sngan":  # ours is NHWC
        c, h, w = out_shape[1:]
        ours = ours.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    ours = ours.reshape(out_shape)

    net = cv2.dnn.readNetFromONNX(path)
    for name, value in feeds.items():
        net.setInput(value, name)
    theirs = net.forward(model.graph.output[0].name).reshape(out_shape)
    ref = reference(model, feeds)

    scale = float(np.abs(ref).max()) if kind == "classifier" else 1.0
    e_ours = float(np.abs(ours - ref).max()) / scale
    e_cv = float(np.abs(theirs - ref).max()) / scale
    e_both = float(np.abs(theirs - ours).max()) / scale
    print(f"{path}: {len(model.graph.node)} nodes; relative to the output's scale {scale:.3g}: "
          f"ours - float64 {e_ours:.2e}, OpenCV - float64 {e_cv:.2e}, OpenCV - ours {e_both:.2e}")
    ok = e_ours <= 1e-5 and e_cv <= cv_tol and e_both <= max(cv_tol, 1e-5)
    if not ok:
        raise SystemExit(f"FAIL: {path} disagrees (tolerance 1e-5, OpenCV {cv_tol:g})")


if __name__ == "__main__":
    main()
