export XLA_FLAGS="--xla_dump_to=/tmp/d --xla_dump_hlo_as_proto --xla_dump_hlo_as_text" PYTHONUNBUFFERED=1
python3 - <<'P'
import jax,jax.numpy as jnp,json,optax
import flax.linen as nn
R=jax.random.PRNGKey;M={}
def go(f,*a):
 c=jax.jit(f).lower(*a).compile();m=c.memory_analysis()
 M[f.__name__]={k:getattr(m,k) for k in dir(m) if k.endswith('_in_bytes')}
def mlp_adam(p,s,x,y):
 def L(p):
  h=x
  for w in p[:-1]:h=jax.nn.relu(h@w)
  return jnp.mean((h@p[-1]-y)**2)
 g=jax.grad(L)(p);u,s=opt.update(g,s,p);return optax.apply_updates(p,u),s
opt=optax.adam(1e-3);ps=[jax.random.normal(R(i),(2048,2048))for i in range(6)]
go(mlp_adam,ps,opt.init(ps),jnp.ones((512,2048)),jnp.ones((512,2048)))
class C(nn.Module):
 @nn.compact
 def __call__(s,x):
  for f in(64,128,256):x=nn.relu(nn.BatchNorm(use_running_average=False)(nn.Conv(f,(3,3))(x)));x=nn.avg_pool(x,(2,2),(2,2))
  return nn.Dense(10)(x.reshape(x.shape[0],-1))
cm=C();x=jnp.ones((64,64,64,3));v=cm.init(R(0),x)
def cnn_train(v,x):
 def L(pr):
  o,_=cm.apply({**v,'params':pr},x,mutable=['batch_stats']);return o.sum()
 return jax.tree.map(lambda a,b:a-0.1*b,v['params'],jax.grad(L)(v['params']))
go(cnn_train,v,x)
def scan_rnn(w,xs):
 def st(h,x):h=jnp.tanh(h@w+x);return h,h*2
 return jax.lax.scan(st,jnp.zeros((256,1024)),xs)
go(scan_rnn,jnp.ones((1024,1024)),jnp.ones((64,256,1024)))
def attn_bf16(q,k,v):
 a=jax.nn.softmax(jnp.einsum('bhqd,bhkd->bhqk',q,k)/8,-1);return jnp.einsum('bhqk,bhkd->bhqd',a,v)
q=jnp.ones((4,16,2048,64),jnp.bfloat16);go(jax.grad(lambda q,k,v:attn_bf16(q,k,v).astype(jnp.float32).sum(),(0,1,2)),q,q,q)
def while_loop(x):
 return jax.lax.fori_loop(0,10,lambda i,c:jnp.sin(c@c.T)+c,x)
go(while_loop,jnp.ones((1024,1024)))
json.dump({'jax':jax.__version__,'memory_analysis':M},open('/tmp/d/memory_analysis.json','w'),indent=1)
print(M)
P
cd /tmp/d && ls | wc -l && tar cJf $OUT/dumps.tar.xz $(ls | grep -E 'after_optimizations|memory_analysis')
ls -la $OUT
