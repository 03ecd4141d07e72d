#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into fuzz/corpus/<target>/ (standard library only).

The seeds are committed; this script documents how they were made and remakes them (it overwrites only
the files it names). Besides well-formed inputs, each corpus holds the hostile cases that docs/SECURITY.md
lists, so that every CI run tries them before mutating further. Two seeds come from the alpha binary
instead and are not written here: corpus/tokenizer_load/valid_alpha_300.model (`alpha tokenizer train
--vocab 300` on a small text) and the outputs of a 3-step tiny run, named real_*.

Names: valid_* and real_* must be accepted by the target's parser (tests/fuzz/test_fuzz_corpus.cpp checks
it); crash_* are inputs a fuzzer crashed on before the fix; the rest are hostile and must be rejected
with a typed error (or, for the tolerant metrics reader, skipped).

Usage: fuzz/make_seeds.py   (from anywhere)
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------------------
# safetensors: [u64 header length][JSON header][data]

def st_raw(header_bytes, data=b"", length=None):
    """A file with the given header text (bytes) and data; `length` overrides the header length field."""
    n = len(header_bytes) if length is None else length
    return struct.pack("<Q", n) + header_bytes + data


def st(header, data=b"", pad=True):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return st_raw(text, data)


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def safetensors_seeds():
    t = "safetensors"
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    put(t, "valid_f32_2x3", st({"w": entry("F32", [2, 3], 0, 24)}, f32))
    put(t, "valid_metadata_two_tensors",
        st({"__metadata__": {"format": "alpha", "step": "7"}, "a": entry("BF16", [2], 0, 4),
            "b": entry("I64", [1], 4, 12)}, b"\x80\x3f\x00\x40" + struct.pack("<q", -5)))
    put(t, "valid_every_dtype",
        st({"f64": entry("F64", [1], 0, 8), "f16": entry("F16", [1], 8, 10), "i32": entry("I32", [1], 10, 14),
            "u16": entry("U16", [1], 14, 16), "u8": entry("U8", [2], 16, 18)}, bytes(range(18))))
    put(t, "valid_scalar_and_empty", st({"s": entry("F32", [], 0, 4), "e": entry("F32", [0, 5], 4, 4)}, f32[:4]))
    put(t, "valid_no_tensors", st({}))
    put(t, "valid_unpadded_header", st({"w": entry("U8", [3], 0, 3)}, b"abc", pad=False))
    # The header length field.
    put(t, "short_file", b"\x08\x00\x00")
    put(t, "header_length_u64_max", st_raw(b"{}", length=2**64 - 1))
    put(t, "header_length_i64_min", st_raw(b"{}", length=2**63))
    put(t, "header_length_past_end", st_raw(b"{}      ", length=4096))
    put(t, "header_length_zero", st_raw(b"", length=0) + b"{}")
    # Sizes.
    put(t, "negative_shape", st({"w": entry("F32", [-1, 6], 0, 24)}, f32))
    put(t, "negative_offset", st({"w": entry("F32", [6], -24, 0)}, f32))
    put(t, "float_shape", st({"w": entry("F32", [1.5, 4], 0, 24)}, f32))
    put(t, "huge_shape", st({"w": entry("F32", [2**63 - 1], 0, 24)}, f32))
    put(t, "shape_past_u64", st({"w": entry("F32", [2**64], 0, 24)}, f32))
    put(t, "shape_product_wraps_to_size", st({"w": entry("U8", [2**32, 2**32 + 24], 0, 24)}, f32))
    put(t, "shape_bytes_wrap_u64", st({"w": entry("F32", [2**62, 1], 0, 0)}))
    put(t, "zero_size_hides_overflow", st({"w": entry("F32", [0, 2**40, 2**40], 0, 0)}))
    put(t, "zero_size_after_overflow", st({"w": entry("F32", [2**62, 2**62, 0], 0, 0)}))
    put(t, "too_many_dims", st({"w": entry("U8", [1] * 5000, 0, 1)}, b"x"))
    # Offsets.
    put(t, "offsets_end_before_begin", st({"w": entry("F32", [0], 24, 0)}, f32))
    put(t, "offsets_out_of_range", st({"w": entry("F32", [6], 1 << 40, (1 << 40) + 24)}, f32))
    put(t, "offsets_past_end", st({"w": entry("F32", [12], 0, 48)}, f32))
    put(t, "offsets_u64_max", st({"w": entry("U8", [1], 2**64 - 2, 2**64 - 1)}, f32))
    put(t, "offsets_sum_wraps", st({"w": entry("U8", [2**64 - 8], 8, 0)}, f32))
    put(t, "offsets_overlap", st({"a": entry("F32", [4], 0, 16), "b": entry("F32", [4], 8, 24)}, f32))
    put(t, "offsets_out_of_order", st({"a": entry("F32", [2], 8, 16), "b": entry("F32", [2], 0, 8)}, f32[:16]))
    put(t, "offsets_gap", st({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 16, 24)}, f32))
    put(t, "offsets_alias", st({"a": entry("F32", [6], 0, 24), "b": entry("F32", [6], 0, 24)}, f32))
    put(t, "offsets_three", st({"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24, 48]}}, f32))
    put(t, "offsets_strings", st({"w": {"dtype": "F32", "shape": [6], "data_offsets": ["0", "24"]}}, f32))
    put(t, "trailing_data", st({"w": entry("F32", [2], 0, 8)}, f32))
    put(t, "size_mismatch", st({"w": entry("F32", [5], 0, 24)}, f32))
    # Dtypes and fields.
    for name, dtype in [("dtype_unknown_f8", "F8_E4M3"), ("dtype_bool", "BOOL"), ("dtype_lowercase", "f32"),
                        ("dtype_empty", ""), ("dtype_number", 4), ("dtype_null", None)]:
        put(t, name, st({"w": entry(dtype, [6], 0, 24)}, f32))
    put(t, "missing_dtype", st({"w": {"shape": [6], "data_offsets": [0, 24]}}, f32))
    put(t, "extra_field", st({"w": dict(entry("F32", [6], 0, 24), extra=1)}, f32))
    put(t, "entry_not_object", st({"w": [1, 2, 3]}, f32))
    put(t, "header_array", st_raw(b"[1,2,3]\x20"))
    put(t, "header_string", st_raw(b'"abc"   '))
    put(t, "metadata_not_strings", st({"__metadata__": {"a": 1, "b": {"c": "d"}}}))
    put(t, "metadata_array", st({"__metadata__": ["a"]}))
    put(t, "duplicate_names",
        st_raw(b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
               b"ab"))
    put(t, "empty_name", st({"": entry("U8", [1], 0, 1)}, b"a"))
    put(t, "invalid_json", st_raw(b'{"w":{"dtype":"F32",'))
    put(t, "invalid_utf8_name", st_raw(b'{"\xff\xfe":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"a"))
    put(t, "nul_in_header", st_raw(b'{"w"\x00:1}'))
    put(t, "deep_nesting", st_raw(b'{"w":{"dtype":"U8","shape":' + b"[" * 3000 + b"]" * 3000 + b',"data_offsets":[0,0]}}'))
    put(t, "big_numbers", st({"w": entry("F32", [6], 0, 24)}, f32).replace(b"[6]", b"[6e400]"))


# ---------------------------------------------------------------------------------------------------------
# checkpoint state.json

def checkpoint_state_seeds():
    t = "checkpoint_state"
    state = {"format_version": 1, "step": 3, "optimizer_step": 3, "data": {"epoch": 0, "index": 3},
             "rng": {"model_seed": 1337, "data_seed": 1},
             "model_config": {"n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 64, "vocab_size": 512}}
    put(t, "valid_state", json.dumps(state, indent=2) + "\n")
    put(t, "valid_minimal", '{"format_version": 1, "step": 0}')
    for name, change in [("format_version_2", {"format_version": 2}), ("format_version_string", {"format_version": "1"}),
                         ("format_version_float", {"format_version": 1.0}), ("step_negative", {"step": -1}),
                         ("step_float", {"step": 1.5}), ("step_string", {"step": "3"}), ("step_i64_max", {"step": 2**63 - 1}),
                         ("step_past_i64", {"step": 2**63}), ("step_u64_max", {"step": 2**64 - 1}),
                         ("step_past_u64", {"step": 2**64}), ("step_null", {"step": None})]:
        put(t, name, json.dumps(dict(state, **change)))
    put(t, "missing_step", '{"format_version": 1}')
    put(t, "missing_format_version", '{"step": 1}')
    put(t, "array", "[1, 2, 3]")
    put(t, "empty", "")
    put(t, "truncated", json.dumps(state)[:40])
    put(t, "bom", b"\xef\xbb\xbf" + json.dumps(state).encode())
    put(t, "deep_nesting", '{"format_version": 1, "step": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}")
    put(t, "invalid_utf8", b'{"format_version": 1, "step": 1, "\xc0\x80": 1}')
    put(t, "duplicate_keys", '{"format_version": 1, "step": 1, "step": -1}')


# ---------------------------------------------------------------------------------------------------------
# token shards: 256 int32 header (magic, version, count), uint16 tokens

def shard(tokens, magic=20240520, version=1, count=None, extra=b""):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    return struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens) + extra


def shard_seeds():
    t = "shard"
    put(t, "valid_ten_tokens", shard(list(range(10))))
    put(t, "valid_empty", shard([]))
    put(t, "valid_max_token", shard([65535, 0, 65535]))
    put(t, "bad_magic", shard([1, 2], magic=20240521))
    put(t, "bad_version", shard([1, 2], version=2))
    put(t, "negative_count", shard([1, 2], count=-2))
    put(t, "count_i32_max", shard([1, 2], count=2**31 - 1))
    put(t, "count_past_data", shard([1, 2], count=3))
    put(t, "count_short_of_data", shard([1, 2, 3], count=2))
    put(t, "odd_trailing_byte", shard([1, 2], extra=b"\x01"))
    put(t, "header_only_magic", struct.pack("<i", 20240520))
    put(t, "header_truncated", shard([1, 2])[:1000])
    put(t, "empty_file", b"")
    put(t, "three_bytes", b"\x38\xd4\x34")


# ---------------------------------------------------------------------------------------------------------
# tokenizer models: SentencePiece ModelProto (protobuf). Mutants of the committed alpha_300.model.

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """[(field number, wire type, value bytes or int)] of a protobuf message."""
    out, i = [], 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((num, wire, v))
    return out


def encode(fs):
    out = bytearray()
    for num, wire, v in fs:
        out += varint(num << 3 | wire)
        if wire == 0:
            out += varint(v)
        elif wire == 2:
            out += varint(len(v)) + v
        else:
            out += v
    return bytes(out)


def piece(text, score=0.0, kind=1):
    return (1, 2, encode([(1, 2, text), (2, 5, struct.pack("<f", score)), (3, 0, kind)]))


def set_field(msg, num, wire, value):
    return encode([f for f in fields(msg) if f[0] != num] + [(num, wire, value)])


def tokenizer_seeds():
    t = "tokenizer_load"
    base_path = os.path.join(ROOT, t, "valid_alpha_300.model")
    if not os.path.exists(base_path):
        print(f"skipping the tokenizer seeds: {base_path} is missing (see this script's docstring)")
        return
    base = open(base_path, "rb").read()
    model = fields(base)
    pieces = [f for f in model if f[0] == 1]
    rest = [f for f in model if f[0] != 1]
    trainer = next(f[2] for f in rest if f[0] == 2)
    normalizer = next((f[2] for f in rest if f[0] == 3), b"")

    def with_pieces(ps, others=rest):
        return encode(ps + others)

    def text_of(p):
        return next(v for n, _, v in fields(p[2]) if n == 1)

    put(t, "truncated_half", base[:len(base) // 2])
    put(t, "empty", b"")
    put(t, "pieces_only", with_pieces(pieces, []))
    put(t, "no_pieces", with_pieces([]))
    put(t, "no_end_of_text", with_pieces([p for p in pieces if text_of(p) != b"<|endoftext|>"]))
    put(t, "no_byte_0x41", with_pieces([p for p in pieces if text_of(p) != b"<0x41>"]))
    put(t, "duplicate_piece", with_pieces(pieces + [pieces[-1]]))
    put(t, "empty_piece", with_pieces(pieces + [piece(b"")]))
    put(t, "invalid_utf8_piece", with_pieces(pieces + [piece(b"\xff\xfe")]))
    put(t, "piece_type_out_of_range", with_pieces(pieces + [piece(b"zz", kind=99)]))
    put(t, "unknown_twice", with_pieces(pieces + [piece(b"<unk2>", kind=2)]))
    put(t, "byte_piece_bad_name", with_pieces(pieces + [piece(b"<0xZZ>", kind=6)]))
    put(t, "nan_scores", with_pieces(pieces[:-1] + [piece(b"nan", score=float("nan"))]))
    for name, kind in [("model_type_unigram", 1), ("model_type_word", 3), ("model_type_char", 4), ("model_type_99", 99)]:
        put(t, name, with_pieces(pieces, [f for f in rest if f[0] != 2] + [(2, 2, set_field(trainer, 3, 0, kind))]))
    # A charsmap (the normalizer's compiled rules, a trie blob) that Alpha's identity normaliser never has.
    put(t, "precompiled_charsmap_garbage",
        with_pieces(pieces, [f for f in rest if f[0] != 3] + [(3, 2, set_field(normalizer, 2, 2, b"\xff" * 64))]))
    put(t, "precompiled_charsmap_huge_size",
        with_pieces(pieces, [f for f in rest if f[0] != 3] +
                    [(3, 2, set_field(normalizer, 2, 2, struct.pack("<I", 0xFFFFFFF0) + b"\x00" * 12))]))
    put(t, "wrong_wire_type", b"\x0d\x00\x00\x00\x00" + base)
    put(t, "length_past_end", b"\x0a\xff\xff\xff\xff\x0f" + base[:16])

    e = "tokenizer_encode"
    for name, text in [("ascii", b"Once upon a time, Tom had 3 cats.\n"), ("empty", b""),
                       ("spaces_tabs_crlf", b"  a\t\tb \r\n\r\n   \n"), ("space_mark", "\u2581x\u2581\u2581 y".encode()),
                       ("multibyte", "caf\u00e9 \u65e5\u672c \U0001F600 \u0301".encode()),
                       ("nul_and_controls", b"a\x00b\x01\x7f\n"), ("endoftext_literal", b"<|endoftext|><unk><0x41>"),
                       ("overlong_slash", b"a\xc0\xafb"), ("surrogate", b"\xed\xa0\x80"), ("past_u10ffff", b"\xf4\x90\x80\x80"),
                       ("truncated_sequence", b"ok \xe2\x96"), ("stray_continuation", b"\x80abc"), ("latin1", b"caf\xe9"),
                       ("ids_in_range", struct.pack("<4i", 0, 1, 2, 399)), ("ids_negative", struct.pack("<2i", -1, 5)),
                       ("ids_past_vocab", struct.pack("<2i", 400, 2**31 - 1))]:
        put(e, name, text)


# ---------------------------------------------------------------------------------------------------------
# configs: model config files (JSON with comments) and train configs

def config_seeds():
    t = "config"
    tiny = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2, "block_size": 64, "vocab_size": 512,
            "dropout": 0.0, "bias": True, "tie_embeddings": True, "attention": "auto", "seed": 1337}
    put(t, "valid_model_tiny", json.dumps(tiny, indent=2))
    put(t, "valid_model_with_comments", "// a comment\n{\n  /* block */ \"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2,"
                                  " \"block_size\": 4, \"vocab_size\": 300 // trailing\n}\n")
    for name, change in [("n_head_zero", {"n_head": 0}), ("n_embd_not_multiple", {"n_embd": 65}),
                         ("n_kv_head_not_divisor", {"n_kv_head": 3}), ("vocab_past_i32", {"vocab_size": 2**31}),
                         ("n_layer_i64_min", {"n_layer": -2**63}), ("n_layer_past_i64", {"n_layer": 2**63}),
                         ("n_layer_float", {"n_layer": 2.5}), ("dropout_one", {"dropout": 1.0}),
                         ("dropout_huge", {"dropout": 1e308}), ("attention_unknown", {"attention": "sparse"}),
                         ("bias_string", {"bias": "yes"}), ("seed_negative", {"seed": -1}), ("seed_u64_max", {"seed": 2**64 - 1}),
                         ("unknown_field", {"n_layers": 2}), ("layernorm_eps_zero", {"layernorm_eps": 0})]:
        put(t, name, json.dumps(dict(tiny, **change)))
    put(t, "model_missing_required", '{"n_layer": 2}')
    put(t, "valid_train_defaults", json.dumps({"steps": 300, "batch_size": 16, "lr": 0.003, "device": "cpu", "precision": "f32"}))
    put(t, "valid_train_full", json.dumps({"steps": 10, "batch_size": 2, "seq_len": 0, "grad_accum": 1, "lr": 3e-3, "min_lr": 3e-4,
                                     "warmup_steps": 2, "lr_decay_steps": 0, "weight_decay": 0.1, "decay_embeddings": False,
                                     "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8, "grad_clip": 1.0, "eval_every": 5,
                                     "eval_batches": 1, "save_every": 5, "keep_last": 2, "data_seed": 1,
                                     "val_fraction": 0.1, "sample_tokens": 0, "temperature": 0.8, "top_k": 40,
                                     "prompt": "", "device": "cpu", "precision": "f32", "tf32": False}))
    for name, change in [("train_device_bad", {"device": "cuda:99999999999999999999"}), ("train_device_gpu", {"device": "cuda:-1"}),
                         ("train_precision_bf16_cpu", {"precision": "bf16"}), ("train_steps_zero", {"steps": 0}),
                         ("train_lr_negative", {"lr": -1}), ("train_min_lr_above_lr", {"min_lr": 1}),
                         ("train_steps_string", {"steps": "10"}), ("train_seed_negative", {"data_seed": -1}),
                         ("train_unknown", {"learning_rate": 1}),
                         ("train_recompute_unknown", {"recompute": "all"}),
                         ("train_loss_scale_not_power_of_two", {"loss_scale": 1000}),
                         ("train_loss_scale_past_2_24", {"loss_scale": 33554432}),
                         ("train_loss_scaling_unknown", {"loss_scaling": "static"}),
                         ("train_loss_scale_growth_zero", {"loss_scale_growth_interval": 0})]:
        put(t, name, json.dumps(dict({"steps": 10, "lr": 0.01}, **change)))
    put(t, "array", "[]")
    put(t, "number", "42")
    put(t, "invalid", "{\"n_layer\": 2,,}")
    put(t, "unterminated_comment", "{ /* \"n_layer\": 2 }")
    put(t, "deep_nesting", '{"n_layer": ' + "[" * 4000 + "]" * 4000 + "}")


# ---------------------------------------------------------------------------------------------------------
# metrics.jsonl

def metrics_seeds():
    t = "metrics_log"
    def rec(step, **kw):
        return json.dumps(dict({"step": step, "loss": 4.5, "lr": 0.003, "val_loss": None}, **kw))

    put(t, "valid_three_steps", "\n".join(rec(s) for s in (1, 2, 3)) + "\n")
    put(t, "last_line_partial", rec(1) + "\n" + rec(2)[:20])
    put(t, "last_line_whole_without_newline", rec(1) + "\n" + rec(2))
    put(t, "garbage_lines", "hello\n" + rec(1) + "\n\x00\x01\n[1,2]\n42\n{}\n" + rec(2) + "\n")
    put(t, "bad_steps", "\n".join([rec(1.5), rec("2"), rec(None), rec(-3), rec(2**63), rec(2**64 - 1), rec(2**64),
                                   rec(-2**63), rec(2**63 - 1)]) + "\n")
    put(t, "crlf", rec(1) + "\r\n" + rec(2) + "\r\n")
    put(t, "blank_lines", "\n\n" + rec(1) + "\n\n\n")
    put(t, "invalid_utf8", b'{"step": 1, "note": "\xff\xfe"}\n' + rec(2).encode() + b"\n")
    put(t, "deep_nesting", '{"step": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}\n")
    put(t, "many_bad_lines", "x\n" * 100)
    put(t, "extra_fields", rec(1, nested={"a": [1, {"b": None}]}, text="</script><script>") + "\n")
    put(t, "empty", "")


if __name__ == "__main__":
    safetensors_seeds()
    checkpoint_state_seeds()
    shard_seeds()
    tokenizer_seeds()
    config_seeds()
    metrics_seeds()
    for target in sorted(os.listdir(ROOT)):
        print(f"{target}: {len(os.listdir(os.path.join(ROOT, target)))} seeds")
