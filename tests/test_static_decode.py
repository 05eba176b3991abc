"""The fixed-shape decoding path (lsp_server/model/static_decode.py) against transformers' own
forward, eagerly on the CPU (the code the CUDA graphs capture), and as graphs on CUDA."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from lsp_server.decoding.speculation.speculator import MAX_GAMMA
from lsp_server.model.hf_cache import GrowingCache
from lsp_server.model.kv_cache import ForwardCancelled, rewind
from lsp_server.model.runtime import ModelRuntime
from lsp_server.model.static_decode import GRAPH_SIZES, StaticDecoder, StaticUnsupported

SMALL = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512)


def small_model(kind: str = "llama", seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**SMALL, tie_word_embeddings=True))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**SMALL))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**SMALL, head_dim=16))
    return model.eval()


def reference(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0].float()


def runtime(model, decoder=None) -> ModelRuntime:
    return ModelRuntime(model, None, torch.device("cpu"), None, 0.0, "small", static=decoder)


IDS = [(7 * i * i + 3 * i + 1) % 300 for i in range(60)]


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_prefill_and_steps_match_transformers(kind):
    model = small_model(kind)
    dec = StaticDecoder(model, capacity=128)
    ref = reference(model, IDS)
    logits, kv = dec.forward(IDS[:40], None, keep=40)
    assert kv.get_seq_length() == 40
    torch.testing.assert_close(logits, ref[:40], atol=1e-4, rtol=1e-4)
    for i in range(40, 45):  # one-token steps
        logits, kv = dec.forward([IDS[i]], kv)
        torch.testing.assert_close(logits[0], ref[i], atol=1e-4, rtol=1e-4)
    logits, kv = dec.forward(IDS[45:50], kv, keep=5)  # a verification pass of 5 tokens
    torch.testing.assert_close(logits, ref[45:50], atol=1e-4, rtol=1e-4)
    rewind(kv, 47)  # two drafted positions rejected: the next pass writes over them
    logits, kv = dec.forward(IDS[47:52], kv, keep=5)
    torch.testing.assert_close(logits, ref[47:52], atol=1e-4, rtol=1e-4)


def test_greedy_tokens_same_as_the_transformers_cache_path():
    model = small_model()
    plain, static = runtime(model), runtime(model, StaticDecoder(model, capacity=128))
    out = {}
    for name, rt in (("plain", plain), ("static", static)):
        logits, past = rt.forward(IDS[:30])
        tokens = []
        for _ in range(25):
            t = int(torch.argmax(logits[-1]))
            tokens.append(t)
            logits, past = rt.forward([t], past)
        out[name] = (tokens, past)
    assert out["plain"][0] == out["static"][0]
    assert isinstance(out["plain"][1], GrowingCache) and not isinstance(out["static"][1], GrowingCache)


def test_documents_swap_in_and_out_of_the_workspace():
    model = small_model()
    dec = StaticDecoder(model, capacity=128)
    a_ids, b_ids = IDS[:30], IDS[30:]
    _, a = dec.forward(a_ids[:-1], None)
    _, b = dec.forward(b_ids[:-1], None)  # b is resident now: a's positions were copied out
    assert dec.workspace.resident is b and a.saved is not None and a.nbytes == 29 * dec.workspace.bytes_per_position
    la, _ = dec.forward(a_ids[-1:], a)
    lb, _ = dec.forward(b_ids[-1:], b)
    torch.testing.assert_close(la[0], reference(model, a_ids)[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lb[0], reference(model, b_ids)[-1], atol=1e-4, rtol=1e-4)


def test_past_the_capacity_the_runtime_goes_on_in_a_transformers_cache():
    model = small_model()
    rt = runtime(model, StaticDecoder(model, capacity=32))
    logits, past = rt.forward(IDS[:30])
    assert not isinstance(past, GrowingCache)
    logits, past = rt.forward(IDS[30:40], past, keep=10)
    assert isinstance(past, GrowingCache) and past.get_seq_length() == 40
    torch.testing.assert_close(logits, reference(model, IDS[:40])[30:40], atol=1e-4, rtol=1e-4)


def test_a_cancelled_pass_leaves_the_cache_as_it_was():
    model = small_model()
    dec = StaticDecoder(model, capacity=128)
    _, kv = dec.forward(IDS[:20], None)
    with pytest.raises(ForwardCancelled):
        dec.forward(IDS[20:30], kv, cancel=lambda: True)
    assert kv.get_seq_length() == 20
    logits, kv = dec.forward(IDS[20:30], kv, keep=10)
    torch.testing.assert_close(logits, reference(model, IDS[:30])[20:], atol=1e-4, rtol=1e-4)


def test_graph_sizes_cover_every_verification_pass():
    assert GRAPH_SIZES == tuple(range(1, MAX_GAMMA + 2))


def test_unknown_architectures_are_refused_with_the_reason():
    from transformers import GPT2Config, GPT2LMHeadModel

    with pytest.raises(StaticUnsupported, match="gpt2"):
        StaticDecoder(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100)))


@pytest.mark.cuda
def test_cuda_graphs_replay_the_eager_passes():
    model = small_model().to("cuda", torch.bfloat16)
    dec = StaticDecoder(model, capacity=256)
    done = dec.warm_up(prompt_tokens=64, sizes=GRAPH_SIZES)
    assert done["graphs"] == list(GRAPH_SIZES)
    eager = StaticDecoder(model, capacity=256)
    la, ka = dec.forward(IDS[:40], None)
    lb, kb = eager.forward(IDS[:40], None)
    for i in range(40, 50):  # graph replays (1 token) against eager passes
        la, ka = dec.forward([IDS[i]], ka)
        lb, kb = eager.forward([IDS[i]], kb)
        assert int(torch.argmax(la[-1])) == int(torch.argmax(lb[-1]))
    for n in GRAPH_SIZES[1:]:
        la, ka = dec.forward(IDS[50 : 50 + n], ka, keep=n)
        lb, kb = eager.forward(IDS[50 : 50 + n], kb, keep=n)
        torch.testing.assert_close(la, lb, atol=2e-2, rtol=2e-2)
        rewind(ka, 50)
        rewind(kb, 50)
