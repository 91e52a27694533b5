"""The example MLP trained data-parallel on every GPU of one process (``jax.sharding``): one BFC
allocator per device (GPU_0_bfc, GPU_1_bfc...), so `allocreplay capture` writes one trace per
device."""

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jax_train import init, train_step

mesh = jax.make_mesh((jax.device_count(),), ("data",))
batch_sharding = NamedSharding(mesh, P("data"))
replicated = NamedSharding(mesh, P())
key = jax.random.PRNGKey(0)
params = jax.device_put(init(key), replicated)
for step, batch in enumerate([256, 512, 256]):
    kx, ky, key = jax.random.split(key, 3)
    x = jax.device_put(jax.random.normal(kx, (batch, 784)), batch_sharding)
    y = jax.device_put(jax.random.randint(ky, (batch,), 0, 10), batch_sharding)
    params, loss = train_step(params, x, y)
    print(f"step {step}: batch {batch} on {jax.device_count()} devices, loss {float(loss):.3f}", flush=True)
