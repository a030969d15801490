"""A function in a real module, so a second process can call the same code."""

import numpy as np


def field(x):
    return np.sin(x) * np.roll(x, 1) + np.exp(-x * x)


if __name__ == "__main__":
    import json

    import symjac as sj

    sj.set_compile_mode("auto")
    out = sj.jacobian(field)(np.linspace(0, 1, 7))
    info = sj.jacobian(field).info(np.linspace(0, 1, 7))
    print(json.dumps({"stats": vars(sj.cache_info()), "tier": info.tier, "sum": float(out.sum()),
                      "bits": out.tobytes().hex()}))
