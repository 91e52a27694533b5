import json,os,pickle,random,sys,time,torch
def gpt2_train(steps,rng):
    from transformers import GPT2Config,GPT2LMHeadModel
    cfg=GPT2Config(n_layer=12,n_embd=768,n_head=12,n_positions=1024,vocab_size=50257)
    model=GPT2LMHeadModel(cfg).cuda();opt=torch.optim.AdamW(model.parameters(),lr=1e-4)
    for _ in range(steps):
        bs=rng.choice([4,8,12]);seq=rng.randint(64,1024)
        x=torch.randint(0,cfg.vocab_size,(bs,seq),device="cuda")
        with torch.autocast("cuda",dtype=torch.bfloat16):loss=model(input_ids=x,labels=x).loss
        loss.backward();opt.step();opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
def resnet50_train(steps,rng):
    import torchvision
    model=torchvision.models.resnet50().cuda();opt=torch.optim.SGD(model.parameters(),lr=0.1,momentum=0.9);lossf=torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        bs=rng.choice([32,64,96]);x=torch.randn(bs,3,224,224,device="cuda");y=torch.randint(0,1000,(bs,),device="cuda")
        loss=lossf(model(x),y);loss.backward();opt.step();opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
def llama_generate(steps,rng):
    from transformers import LlamaConfig,LlamaForCausalLM
    cfg=LlamaConfig(hidden_size=1024,intermediate_size=2816,num_hidden_layers=8,num_attention_heads=16,num_key_value_heads=8,vocab_size=32000,max_position_embeddings=4096)
    model=LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    with torch.no_grad():
        for _ in range(steps):
            bs=rng.choice([1,4,8,16]);plen=rng.randint(16,1500)
            x=torch.randint(0,cfg.vocab_size,(bs,plen),device="cuda")
            model.generate(input_ids=x,attention_mask=torch.ones_like(x),max_new_tokens=rng.randint(16,96),do_sample=False,pad_token_id=0)
    torch.cuda.synchronize()
def two_streams(steps,rng):
    side=torch.cuda.Stream();w=[torch.randn(4096,4096,device="cuda",requires_grad=True) for _ in range(6)]
    opt=torch.optim.Adam(w,lr=1e-3)
    for i in range(steps):
        with torch.cuda.stream(side):
            bs=rng.choice([512,1024,2048,3072]);host=torch.randn(bs,4096).pin_memory();pre=host.to("cuda",non_blocking=True)
            extra=[torch.empty(rng.randint(1,64)<<20,dtype=torch.uint8,device="cuda") for _ in range(3)]
        torch.cuda.current_stream().wait_stream(side);pre.record_stream(torch.cuda.current_stream())
        for e in extra:e.record_stream(torch.cuda.current_stream())
        x=pre
        for m in w:x=torch.relu(x@m)
        x.square().mean().backward();opt.step();opt.zero_grad(set_to_none=True)
        del pre,extra,x
    torch.cuda.synchronize()
def bert_finetune(steps,rng):
    from transformers import BertConfig,BertForSequenceClassification
    cfg=BertConfig(num_hidden_layers=12,hidden_size=768,num_attention_heads=12,intermediate_size=3072,vocab_size=30522)
    model=BertForSequenceClassification(cfg).cuda();opt=torch.optim.AdamW(model.parameters(),lr=2e-5)
    for _ in range(steps):
        bs=rng.choice([8,16,32]);seq=rng.randint(32,512)
        x=torch.randint(0,cfg.vocab_size,(bs,seq),device="cuda");y=torch.randint(0,2,(bs,),device="cuda")
        with torch.autocast("cuda",dtype=torch.bfloat16):loss=model(input_ids=x,labels=y).loss
        loss.backward();opt.step();opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
def vit_train(steps,rng):
    import torchvision
    model=torchvision.models.vit_b_16().cuda();opt=torch.optim.SGD(model.parameters(),lr=0.01,momentum=0.9);lossf=torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        bs=rng.choice([16,32,64]);x=torch.randn(bs,3,224,224,device="cuda");y=torch.randint(0,1000,(bs,),device="cuda")
        loss=lossf(model(x),y);loss.backward();opt.step();opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
def t5_generate(steps,rng):
    from transformers import T5Config,T5ForConditionalGeneration
    cfg=T5Config(d_model=512,d_ff=2048,num_layers=6,num_heads=8,vocab_size=32128,decoder_start_token_id=0,pad_token_id=0)
    model=T5ForConditionalGeneration(cfg).cuda().eval()
    with torch.no_grad():
        for _ in range(steps):
            bs=rng.choice([1,4,8]);n=rng.randint(16,512)
            x=torch.randint(1,cfg.vocab_size,(bs,n),device="cuda")
            model.generate(input_ids=x,attention_mask=torch.ones_like(x),max_new_tokens=rng.randint(16,64),num_beams=4,do_sample=False)
    torch.cuda.synchronize()
def gpt2_generate(steps,rng):
    from transformers import GPT2Config,GPT2LMHeadModel
    cfg=GPT2Config(n_layer=12,n_embd=768,n_head=12,n_positions=1024,vocab_size=50257)
    model=GPT2LMHeadModel(cfg).cuda().to(torch.bfloat16).eval()
    with torch.no_grad():
        for _ in range(steps):
            bs=rng.choice([1,2,4]);n=rng.randint(16,600)
            x=torch.randint(0,cfg.vocab_size,(bs,n),device="cuda")
            model.generate(input_ids=x,attention_mask=torch.ones_like(x),max_new_tokens=rng.randint(16,96),num_beams=3,do_sample=False,pad_token_id=0)
    torch.cuda.synchronize()
def convnext_train(steps,rng):
    import torchvision
    model=torchvision.models.convnext_tiny().cuda();opt=torch.optim.AdamW(model.parameters(),lr=1e-3);lossf=torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        bs=rng.choice([32,64,96]);x=torch.randn(bs,3,224,224,device="cuda");y=torch.randint(0,1000,(bs,),device="cuda")
        with torch.autocast("cuda",dtype=torch.bfloat16):loss=lossf(model(x),y)
        loss.backward();opt.step();opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
def req(snap,path):
    e=[t for t in snap["device_traces"] if t][0];ids={};n=0;streams={};out=[]
    for k,x in enumerate(e):
        a=x["action"]
        if a=="alloc":
            s=streams.setdefault(x["stream"],len(streams));ids[x["addr"]]=n;out.append("a %d %d %d"%(n,x["size"],s));n+=1
        elif a=="free_requested":
            nx=e[k+1] if k+1<len(e) else None
            d=not(nx and nx["action"]=="free_completed" and nx["addr"]==x["addr"])
            out.append("r %d %d"%(ids[x["addr"]],int(d)))
        elif a=="free_completed":out.append("c %d"%ids.pop(x["addr"]))
    open(path,"w").write("%d %d\n"%(n,len(streams))+"\n".join(out)+"\n")
name,steps,out=sys.argv[1],int(sys.argv[2]),sys.argv[3]
seed=0;torch.manual_seed(seed);rng=random.Random(seed);torch.cuda.init()
conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF","");hist="cudaMallocAsync" not in conf
if hist:torch.cuda.memory._record_memory_history(max_entries=50_000_000,context=None)
t0=time.time();globals()[name](steps,rng);wall=time.time()-t0
ms=torch.cuda.memory_stats()
meta={"workload":name,"steps":steps,"seed":seed,"alloc_conf":conf,"torch":torch.__version__,"wall_s":wall,"memory_stats":ms}
if hist:
    snap=torch.cuda.memory._snapshot();torch.cuda.memory._record_memory_history(enabled=None)
    pickle.dump(snap,open(out+".pickle","wb"));req(snap,out+".req")
json.dump(meta,open(out+".json","w"),indent=1,default=str)
print(out,"peak_alloc",ms.get("allocated_bytes.all.peak"),"peak_reserved",ms.get("reserved_bytes.all.peak"),flush=True)
