"""A small JAX training run for `allocreplay capture`'s examples: a 3-layer MLP classifier
trained with plain SGD under ``jax.jit``, with two batch sizes (two compiled programs). Nothing
in it knows about allocreplay:

    allocreplay capture -o jax_train.arrow -- python scripts/examples/jax_train.py
"""

import jax
import jax.numpy as jnp


def init(key, sizes=(784, 1024, 1024, 10)):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (m, n)) * (1 / m) ** 0.5, jnp.zeros(n)) for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def loss_fn(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    logits = x @ w + b
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss


def main() -> None:
    key = jax.random.PRNGKey(0)
    params = init(key)
    for step, batch in enumerate([256, 256, 512, 512, 256]):
        kx, ky, key = jax.random.split(key, 3)
        x = jax.random.normal(kx, (batch, 784))
        y = jax.random.randint(ky, (batch,), 0, 10)
        params, loss = train_step(params, x, y)
        print(f"step {step}: batch {batch} loss {float(loss):.3f}", flush=True)


if __name__ == "__main__":
    main()
