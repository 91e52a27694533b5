"""New workloads for the cuda-async out-of-sample check (issue 13, item 2). Declared before any
was run: DEV may be looked at while changing the model; HOLDOUT never is (reported separately).
Same conventions as shared/capture/torch_run.py: seed 0, random.Random(0). Generate workloads fix
their output length (min_new_tokens = max_new_tokens) so every run makes the same requests.
Usage: python workloads.py NAME STEPS [STATS.json]"""
import json, os, random, sys, time
import torch

DEV = ["opt_generate", "gptneox_generate", "efficientnet_train", "t5_train"]
HOLDOUT = ["mistral_generate", "qwen2_generate", "mobilenet_train", "swin_train"]


def _generate(model, vocab, steps, rng, sizes, plen, new, **kw):
    with torch.no_grad():
        for _ in range(steps):
            bs = rng.choice(sizes); n = rng.randint(*plen); m = rng.randint(*new)
            x = torch.randint(0, vocab, (bs, n), device="cuda")
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=m, min_new_tokens=m, pad_token_id=0, **kw)
    torch.cuda.synchronize()


def opt_generate(steps, rng):
    from transformers import OPTConfig, OPTForCausalLM
    cfg = OPTConfig(hidden_size=1024, ffn_dim=4096, num_hidden_layers=12, num_attention_heads=16, vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=1024)
    model = OPTForCausalLM(cfg).cuda().half().eval()
    _generate(model, cfg.vocab_size, steps, rng, [1, 2, 4, 8], (16, 900), (32, 160), do_sample=False)


def gptneox_generate(steps, rng):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    cfg = GPTNeoXConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, vocab_size=50432, max_position_embeddings=2048)
    model = GPTNeoXForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    _generate(model, cfg.vocab_size, steps, rng, [1, 2, 4], (16, 700), (32, 128), num_beams=2, do_sample=False)


def mistral_generate(steps, rng):
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(hidden_size=1024, intermediate_size=3584, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
    model = MistralForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    _generate(model, cfg.vocab_size, steps, rng, [1, 4, 8, 16], (16, 1200), (64, 256), do_sample=True, top_k=50)


def qwen2_generate(steps, rng):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=12, num_attention_heads=14, num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096)
    model = Qwen2ForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    _generate(model, cfg.vocab_size, steps, rng, [2, 4, 8, 16, 32], (32, 1000), (64, 200), do_sample=False)


def _vision_train(model, steps, rng, sizes, opt, autocast):
    lossf = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        bs = rng.choice(sizes)
        x = torch.randn(bs, 3, 224, 224, device="cuda"); y = torch.randint(0, 1000, (bs,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = lossf(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def efficientnet_train(steps, rng):
    import torchvision
    model = torchvision.models.efficientnet_b0().cuda()
    _vision_train(model, steps, rng, [32, 64, 128], torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), False)


def mobilenet_train(steps, rng):
    import torchvision
    model = torchvision.models.mobilenet_v3_large().cuda()
    _vision_train(model, steps, rng, [64, 128, 192], torch.optim.AdamW(model.parameters(), lr=1e-3), True)


def swin_train(steps, rng):
    import torchvision
    model = torchvision.models.swin_t().cuda()
    _vision_train(model, steps, rng, [16, 32, 64], torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), False)


def t5_train(steps, rng):
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128, decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        bs = rng.choice([8, 16, 32]); n = rng.randint(64, 512); m = rng.randint(16, 128)
        x = torch.randint(1, cfg.vocab_size, (bs, n), device="cuda"); y = torch.randint(1, cfg.vocab_size, (bs, m), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=y).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    name, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0); rng = random.Random(0); torch.cuda.init()
    t0 = time.time(); globals()[name](steps, rng); wall = time.time() - t0
    ms = torch.cuda.memory_stats()
    if len(sys.argv) > 3:
        json.dump({"workload": name, "steps": steps, "seed": 0, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "torch": torch.__version__, "wall_s": wall, "memory_stats": ms}, open(sys.argv[3], "w"), indent=1, default=str)
    print(name, "wall", round(wall, 1), "peak_alloc", ms.get("allocated_bytes.all.peak"), "peak_reserved", ms.get("reserved_bytes.all.peak"), flush=True)
