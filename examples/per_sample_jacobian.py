"""Per-sample Jacobians of a small classifier: shape [batch, out, in].

The Jacobian of the batched function would be (batch, out, batch, in), almost
all zeros.  sj.vmap applies the per-sample Jacobian to every sample in one
compiled loop and returns only the (batch, out, in) blocks.

Run: python examples/per_sample_jacobian.py
"""

import numpy as np

import symjac as sj

rng = np.random.default_rng(1)
W1 = rng.standard_normal((4, 6)) / 2   # 4 inputs -> 6 hidden units
W2 = rng.standard_normal((6, 3)) / 2   # 6 hidden -> 3 classes


def classifier(x):
    """Class probabilities of one sample x (4,): a softmax over 3 classes."""
    logits = np.tanh(x @ W1) @ W2
    e = np.exp(logits - np.max(logits))
    return e / np.sum(e)


if __name__ == "__main__":
    X = rng.standard_normal((8, 4))   # a batch of 8 samples

    per_sample = sj.vmap(sj.jacobian(classifier))(X)
    print("per-sample Jacobians:", per_sample.shape)   # (8, 3, 4): [batch, out, in]

    # Each block is the Jacobian of one sample ...
    assert np.allclose(per_sample[2], sj.jacobian(classifier)(X[2]))
    # ... and probabilities sum to 1, so each Jacobian's columns sum to 0.
    assert np.allclose(per_sample.sum(axis=1), 0.0)
    print("column sums (all ~0):", np.abs(per_sample.sum(axis=1)).max())
