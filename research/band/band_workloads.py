"""Session 13: ten workloads for the cuda-async band's out-of-sample check (issue 29 item 3),
declared before any ran and never used to calibrate the band: each is captured once under the
native allocator (allocreplay capture's hook) and run three times under
backend:cudaMallocAsync, one run at a time. Seed 0, random.Random(0), fixed output lengths.
Usage: python band_workloads.py NAME [STATS.json]"""
import json, os, random, sys, time
import torch


def _train(model, opt, batches, autocast=False):
    for x, y in batches():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(x, y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def gpt2_small_train(rng):
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=32000, n_positions=1024)).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    def batches():
        for _ in range(6):
            bs = rng.choice([8, 12, 16]); n = rng.randint(128, 512)
            x = torch.randint(0, 32000, (bs, n), device="cuda"); yield x, x
    _train(lambda x, y: m(input_ids=x, labels=y).loss, opt, batches)


def bert_train(rng):
    from transformers import BertConfig, BertForSequenceClassification
    m = BertForSequenceClassification(BertConfig(num_hidden_layers=6, hidden_size=512, num_attention_heads=8, intermediate_size=2048, vocab_size=30522)).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    def batches():
        for _ in range(6):
            bs = rng.choice([16, 24, 32]); n = rng.randint(64, 384)
            yield torch.randint(0, 30522, (bs, n), device="cuda"), torch.randint(0, 2, (bs,), device="cuda")
    _train(lambda x, y: m(input_ids=x, labels=y).loss, opt, batches, autocast=True)


def _generate(model, vocab, steps, rng, sizes, plen, new, **kw):
    with torch.no_grad():
        for _ in range(steps):
            bs = rng.choice(sizes); n = rng.randint(*plen); k = rng.randint(*new)
            x = torch.randint(0, vocab, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=k, min_new_tokens=k, pad_token_id=0, **kw)
    torch.cuda.synchronize()


def llama_generate_b(rng):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12, num_key_value_heads=4, vocab_size=32000)
    _generate(LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval(), 32000, 3, rng, [1, 4, 8], (32, 400), (32, 96), do_sample=False)


def opt_small_serve(rng):
    from transformers import OPTConfig, OPTForCausalLM
    cfg = OPTConfig(hidden_size=768, ffn_dim=3072, num_hidden_layers=12, num_attention_heads=12, vocab_size=50272, word_embed_proj_dim=768)
    _generate(OPTForCausalLM(cfg).cuda().half().eval(), 50272, 15, rng, list(range(1, 17)), (16, 300), (4, 24), do_sample=False)


def gemma_generate_b(rng):
    from transformers import GemmaConfig, GemmaForCausalLM
    cfg = GemmaConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=1, head_dim=96, vocab_size=32000)
    _generate(GemmaForCausalLM(cfg).cuda().to(torch.bfloat16).eval(), 32000, 3, rng, [2, 4, 16], (64, 600), (48, 96), do_sample=False)


def t5_small_generate(rng):
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128, decoder_start_token_id=0, pad_token_id=0)
    _generate(T5ForConditionalGeneration(cfg).cuda().eval(), 32128, 3, rng, [4, 8], (64, 300), (32, 64), do_sample=False)


def _vision(model, rng, sizes, steps, res=224, autocast=False):
    model = model.cuda(); opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9); lossf = torch.nn.CrossEntropyLoss()
    def batches():
        for _ in range(steps):
            bs = rng.choice(sizes)
            yield torch.randn(bs, 3, res, res, device="cuda"), torch.randint(0, 1000, (bs,), device="cuda")
    _train(lambda x, y: lossf(model(x), y), opt, batches, autocast)


def resnet18_train(rng):
    import torchvision; _vision(torchvision.models.resnet18(), rng, [64, 96, 128], 8)


def vit_b32_train(rng):
    import torchvision; _vision(torchvision.models.vit_b_32(), rng, [32, 48, 64], 6, autocast=True)


def convnext_tiny_train(rng):
    import torchvision; _vision(torchvision.models.convnext_tiny(), rng, [16, 32, 48], 5)


def mlp_train(rng):
    m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU()) for _ in range(6)], torch.nn.Linear(4096, 10)).cuda()
    opt = torch.optim.Adam(m.parameters(), lr=1e-4); lossf = torch.nn.CrossEntropyLoss()
    def batches():
        for _ in range(20):
            bs = rng.choice([256, 512, 1024]); yield torch.randn(bs, 4096, device="cuda"), torch.randint(0, 10, (bs,), device="cuda")
    _train(lambda x, y: lossf(m(x), y), opt, batches)


NAMES = ["gpt2_small_train", "bert_train", "llama_generate_b", "opt_small_serve", "gemma_generate_b", "t5_small_generate", "resnet18_train", "vit_b32_train", "convnext_tiny_train", "mlp_train"]

if __name__ == "__main__":
    name = sys.argv[1]
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    t0 = time.time(); globals()[name](rng); wall = time.time() - t0
    ms = torch.cuda.memory_stats()
    if len(sys.argv) > 2:
        json.dump({"workload": name, "seed": 0, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "torch": torch.__version__, "wall_s": wall, "memory_stats": ms}, open(sys.argv[2], "w"), indent=1, default=str)
    print(name, "wall", round(wall, 1), "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)
