/* train/safetensors.c: files written tensor by tensor and read back in
 * every float dtype (whole and by element range), F64 and foreign dtypes,
 * shard sets from an index, and headers that must be refused with a clear
 * error: impossible lengths, offsets outside the data or overlapping, a
 * span that does not fit the shape, unknown dtypes, bad JSON, truncated
 * files. Then Hugging Face directories (train/hf_*.c): a whole GPT or
 * Llama saved, loaded back into tensor-parallel and pipeline parts;
 * config.json read and refused field by field; the name tables. */
#include "core/half.h"
#include "test.h"
#include "train/hf_names.h"
#include "train/safetensors.h"
#include "weft.h"

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_dir(void)
{
    if (dir[0])
        nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

TEST_INIT
{
    snprintf(dir, sizeof dir, "/tmp/weft_st_XXXXXX");
    if (!mkdtemp(dir))
        dir[0] = 0;
    atexit(remove_dir);
}

static const char *at(const char *name)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* A file of an 8-byte length (len, or the header's own when len < 0),
 * the header text and n data bytes. */
static void raw_file(const char *path, const char *header, long long len, size_t n)
{
    FILE *f = fopen(path, "wb");
    uint64_t l = len < 0 ? strlen(header) : (uint64_t)len;
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(l >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < n; i++)
        fputc((int)(i * 7 + 1), f);
    fclose(f);
}

/* st_open refuses path with WEFT_EIO and an error holding want. */
static void refused(const char *path, const char *want)
{
    st_file *f = (st_file *)1;
    char err[512] = "";
    int rc = st_open(&f, path, err, sizeof err);
    CHECKF(rc == WEFT_EIO && f == NULL && strstr(err, want) && strstr(err, path),
           "rc %d, err '%s', want '%s'", rc, err, want);
}

static float value(int t, size_t e)
{
    return (float)((double)(e * 37 % 101) / 7.0 - 5.0) * (t + 1);
}

static void round_trip(int dtype)
{
    const st_spec specs[4] = { { "w", 2, { 5, 7 } }, { "empty", 2, { 0, 3 } },
                               { "b", 1, { 9 } }, { "s", 0, { 0 } } };
    size_t numel[4] = { 35, 0, 9, 1 };
    st_writer *w;
    const char *path = at("rt.safetensors");
    unlink(path);
    CHECK(st_writer_open(&w, path, specs, 4, dtype, NULL, 0) == 0);
    for (int t = 0; t < 4; t++) /* a tensor in pieces: one element at a time */
        for (size_t e = 0; e < numel[t]; e++) {
            float x = value(t, e);
            CHECK(st_writer_put(w, &x, 1) == 0);
        }
    CHECK(access(path, F_OK) != 0); /* not under its name until complete */
    CHECK(st_writer_close(w, NULL, 0) == 0);
    st_file *f;
    char err[256];
    CHECKF(st_open(&f, path, err, sizeof err) == 0, "%s", err);
    if (!f)
        return;
    CHECK(f->n == 4 && (f->data_start % 8) == 0);
    for (int t = 0; t < 4; t++) {
        int i = st_find(f, specs[t].name);
        CHECK(i >= 0 && f->t[i].dtype == dtype && f->t[i].ndim == specs[t].ndim &&
              f->t[i].numel == numel[t]);
        float got[64];
        CHECK(st_read(f, i, 0, numel[t], got, NULL, 0) == 0);
        int same = 1;
        for (size_t e = 0; e < numel[t]; e++) {
            float x = value(t, e);
            float want = dtype == ST_F32 ? x : dtype == ST_F16 ? f16_to_f32(f32_to_f16(x))
                                                               : bf16_to_f32(f32_to_bf16(x));
            same &= memcmp(&got[e], &want, sizeof want) == 0;
        }
        CHECKF(same, "%s in %s", specs[t].name, st_dtype_name(dtype));
    }
    /* a range in the middle, and one past the end */
    float part[3];
    CHECK(st_read(f, st_find(f, "w"), 11, 3, part, NULL, 0) == 0);
    CHECK(part[0] == (dtype == ST_F32 ? value(0, 11) : part[0]) && part[2] != part[1]);
    CHECK(st_read(f, st_find(f, "w"), 33, 3, part, err, sizeof err) == WEFT_EINVAL);
    CHECK(st_find(f, "nope") < 0);
    st_close(f);
}

TEST(round_trip_every_dtype)
{
    round_trip(ST_F32);
    round_trip(ST_F16);
    round_trip(ST_BF16);
}

TEST(f64_and_foreign_dtypes)
{
    const char *path = at("f64.safetensors");
    const char *h = "{\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                    "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[16,20]},"
                    "\"__metadata__\":{\"format\":\"pt\"}}";
    FILE *fp = fopen(path, "wb");
    uint64_t l = strlen(h);
    fwrite(&l, 8, 1, fp); /* this machine is little-endian, as the format */
    fwrite(h, 1, l, fp);
    double d[2] = { 0.5, -3.25 };
    int32_t i = 5;
    fwrite(d, 8, 2, fp);
    fwrite(&i, 4, 1, fp);
    fclose(fp);
    st_file *f;
    CHECK(st_open(&f, path, NULL, 0) == 0);
    float got[2];
    CHECK(st_read(f, st_find(f, "d"), 0, 2, got, NULL, 0) == 0 && got[0] == 0.5f &&
          got[1] == -3.25f);
    char err[256];
    CHECK(st_read(f, st_find(f, "i"), 0, 1, got, err, sizeof err) == WEFT_ENOTSUP &&
          strstr(err, "I32"));
    st_close(f);
}

TEST(malformed_headers)
{
    const char *p = at("bad.safetensors");
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    raw_file(p, ok, -1, 8);
    st_file *f;
    CHECK(st_open(&f, p, NULL, 0) == 0);
    st_close(f);
    raw_file(p, ok, 1000, 8);
    refused(p, "header length 1000 is impossible");
    raw_file(p, ok, 1, 8);
    refused(p, "header length 1 is impossible");
    raw_file(p, "", 0, 0);
    refused(p, "header length 0");
    FILE *fp = fopen(p, "wb");
    fputs("abc", fp);
    fclose(fp);
    refused(p, "too short");
    raw_file(p, ok, -1, 7); /* truncated: a byte of the data missing */
    refused(p, "outside the 7 data bytes");
    raw_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", -1, 8);
    refused(p, "outside");
    raw_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", -1, 8);
    refused(p, "outside");
    raw_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, 12);
    refused(p, "overlap");
    raw_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8);
    refused(p, "need 12");
    raw_file(p, "{\"a\":{\"dtype\":\"F12\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8);
    refused(p, "unknown dtype \"F12\"");
    raw_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, 8);
    refused(p, "bad dimension");
    raw_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", -1, 8);
    refused(p, "needs dtype, shape and data_offsets");
    raw_file(p, "[1, 2]", -1, 8);
    refused(p, "not a JSON object");
    raw_file(p, "{\"a\": {\"dtype\": \"F32\",}}", -1, 8);
    refused(p, "offset 22");
    raw_file(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8);
    refused(p, "duplicate");
    raw_file(p, "{\"__metadata__\":{\"x\":1}}", -1, 0);
    refused(p, "__metadata__ values must be strings");
    refused(at("missing.safetensors"), "cannot open");
}

TEST(writer_misuse)
{
    const st_spec s[1] = { { "x", 1, { 4 } } };
    const char *p = at("w.safetensors");
    st_writer *w;
    float x[5] = { 1, 2, 3, 4, 5 };
    char err[256] = "";
    CHECK(st_writer_open(&w, p, s, 1, ST_F32, NULL, 0) == 0);
    CHECK(st_writer_put(w, x, 3) == 0);
    CHECK(st_writer_close(w, err, sizeof err) == WEFT_EINVAL && strstr(err, "0 of 1"));
    CHECK(access(p, F_OK) != 0);
    CHECK(st_writer_open(&w, p, s, 1, ST_F32, NULL, 0) == 0);
    CHECK(st_writer_put(w, x, 5) == WEFT_EINVAL); /* more than the tensors hold */
    CHECK(st_writer_close(w, NULL, 0) != 0 && access(p, F_OK) != 0);
    CHECK(st_writer_open(&w, p, s, 1, ST_I32, NULL, 0) == WEFT_EINVAL);
    CHECK(st_writer_open(&w, at("no/such/dir/x"), s, 1, ST_F32, err, sizeof err) == WEFT_EIO);
}

/* Two shards and their index, tensors a and b in one, c in the other. */
static void write_shards(const char *sub, const char *index)
{
    char d[256], p[300];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    mkdir(d, 0777);
    const st_spec s1[2] = { { "a", 1, { 2 } }, { "b", 1, { 3 } } }, s2[1] = { { "c", 1, { 1 } } };
    float x[6] = { 1, 2, 3, 4, 5, 6 };
    st_writer *w;
    snprintf(p, sizeof p, "%s/m-1.safetensors", d);
    CHECK(st_writer_open(&w, p, s1, 2, ST_F32, NULL, 0) == 0);
    st_writer_put(w, x, 5);
    CHECK(st_writer_close(w, NULL, 0) == 0);
    snprintf(p, sizeof p, "%s/m-2.safetensors", d);
    CHECK(st_writer_open(&w, p, s2, 1, ST_BF16, NULL, 0) == 0);
    st_writer_put(w, x + 5, 1);
    CHECK(st_writer_close(w, NULL, 0) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    FILE *f = fopen(p, "w");
    fputs(index, f);
    fclose(f);
}

TEST(shard_sets)
{
    write_shards("set", "{\"metadata\":{},\"weight_map\":{\"a\":\"m-1.safetensors\","
                        "\"b\":\"m-1.safetensors\",\"c\":\"m-2.safetensors\"}}");
    st_set *s;
    char err[512];
    CHECKF(st_set_open(&s, at("set"), err, sizeof err) == 0, "%s", err);
    if (s) {
        CHECK(s->n == 2);
        const st_file *f;
        float v[3];
        int i = st_set_find(s, "c", &f);
        CHECK(i >= 0 && st_read(f, i, 0, 1, v, NULL, 0) == 0 && v[0] == 6);
        i = st_set_find(s, "b", &f);
        CHECK(i >= 0 && st_read(f, i, 0, 3, v, NULL, 0) == 0 && v[0] == 3 && v[2] == 5);
        CHECK(st_set_find(s, "d", &f) < 0);
        st_set_close(s);
    }
    write_shards("wrong", "{\"weight_map\":{\"a\":\"m-2.safetensors\"}}");
    CHECK(st_set_open(&s, at("wrong"), err, sizeof err) == WEFT_EIO &&
          strstr(err, "\"a\" is not in m-2.safetensors"));
    write_shards("escape", "{\"weight_map\":{\"a\":\"../x.safetensors\"}}");
    CHECK(st_set_open(&s, at("escape"), err, sizeof err) == WEFT_EIO &&
          strstr(err, "bad shard name"));
    write_shards("nomap", "{\"weight\":{}}");
    CHECK(st_set_open(&s, at("nomap"), err, sizeof err) == WEFT_EIO && strstr(err, "weight_map"));
    CHECK(st_set_open(&s, at("nothing"), err, sizeof err) == WEFT_EIO &&
          strstr(err, "neither model.safetensors"));
    /* one file wins over an index beside it */
    const st_spec one[1] = { { "z", 1, { 1 } } };
    st_writer *w;
    float z = 9;
    CHECK(st_writer_open(&w, at("set/model.safetensors"), one, 1, ST_F32, NULL, 0) == 0);
    st_writer_put(w, &z, 1);
    st_writer_close(w, NULL, 0);
    CHECK(st_set_open(&s, at("set"), err, sizeof err) == 0 && s->n == 1);
    st_set_close(s);
}

/* A whole model saved as a Hugging Face directory loads into every part
 * of it: each tensor-parallel shell (tp 2, built without a group) and each
 * pipeline stage holds, element for element, what the whole holds there
 * (vocabulary padding zero); the file's Conv1D weights are [in, out]. */
static void parts_of(const char *spec, const char *sub)
{
    weft_model_config c;
    weft_model *whole = NULL;
    char err[512] = "";
    CHECK(weft_model_config_parse(spec, &c) == 0 && weft_model_create(&whole, &c, 5) == 0);
    if (!whole)
        return;
    const char *d = at(sub);
    CHECKF(weft_model_save_hf(whole, d, err, sizeof err) == 0, "%s", err);
    const float *W = weft_model_params(whole, NULL);
    int nb = weft_model_block_count(&c);
    weft_block_range all = { 0, nb }, stages[2] = { { 0, nb / 2 }, { nb / 2, nb - nb / 2 } };
    for (int k = 0; k < 4; k++) {
        weft_model *m = NULL;
        int rc = k < 2 ? weft_model_create_tp(&m, &c, 9, &all, 1, 0, NULL, 2, k)
                       : weft_model_create_stage(&m, &c, 9, &stages[k - 2], 1, 0);
        CHECK(rc == 0);
        if (rc)
            continue;
        CHECKF(weft_model_load_hf(m, d, err, sizeof err) == 0, "%s: %s", spec, err);
        const float *P = weft_model_params(m, NULL);
        int same = 1;
        for (int i = 0; i < weft_model_tensor_count(m); i++) {
            weft_tensor_info ti, wi;
            weft_model_tensor_info(m, i, &ti);
            weft_model_tensor_info(whole, weft_model_tensor_find(whole, ti.name), &wi);
            for (size_t e = 0; e < ti.numel; e++) {
                size_t w;
                float want = weft_model_tensor_whole_elem(m, i, e, &w) == 0 ? W[wi.offset + w] : 0;
                same &= P[ti.offset + e] == want;
            }
        }
        CHECKF(same, "%s: part %d", spec, k);
        weft_model_destroy(m);
    }
    /* a part is not saved; another shape is refused naming both */
    weft_model *m = NULL, *other = NULL;
    CHECK(weft_model_create_tp(&m, &c, 9, &all, 1, 0, NULL, 2, 0) == 0);
    CHECK(weft_model_save_hf(m, at("nowhere"), err, sizeof err) == WEFT_EINVAL);
    weft_model_config c2 = c;
    c2.n_layer++;
    CHECK(weft_model_create(&other, &c2, 1) == 0);
    CHECK(weft_model_load_hf(other, d, err, sizeof err) == WEFT_ECONFIG && strstr(err, "describes"));
    weft_model_destroy(m);
    weft_model_destroy(other);
    weft_model_destroy(whole);
}

TEST(hf_model_parts)
{
    parts_of("gpt:vocab=37,ctx=8,layers=2,heads=4,dim=16", "gpt");
    parts_of("llama:vocab=37,ctx=8,layers=2,heads=4,kv_heads=2,dim=16,ffn=24", "llama");
    parts_of("llama:vocab=37,ctx=8,layers=1,heads=4,kv_heads=2,dim=16,ffn=24,tied=1,theta=500,"
             "eps=1e-6", "llama-tied");
    /* Mixtral: each expert's projections a tensor of their own, read into
     * tensor-parallel shells that hold a share of every expert's width */
    parts_of("llama:vocab=37,ctx=8,layers=2,heads=4,kv_heads=2,dim=16,ffn=24,experts=4,topk=2,"
             "moe_ffn=8,aux=0.01", "mixtral");
    /* GPT-2's Conv1D layout in the file: c_attn is [in, out] */
    st_set *s;
    const st_file *f;
    CHECK(st_set_open(&s, at("gpt"), NULL, 0) == 0);
    int i = st_set_find(s, "transformer.h.0.attn.c_attn.weight", &f);
    CHECK(i >= 0 && f->t[i].shape[0] == 16 && f->t[i].shape[1] == 48);
    CHECK(st_set_find(s, "lm_head.weight", &f) < 0);
    st_set_close(s);
    weft_model_config c;
    char err[256];
    CHECK(weft_hf_config_read(at("llama-tied"), &c, err, sizeof err) == 0 && c.tied == 1 &&
          c.rms_eps == 1e-6f && c.rope_theta == 500.0f && c.n_kv_head == 2 && c.ffn == 24);
    /* Mixtral's width is the experts': moe_ffn comes back as ffn */
    CHECK(weft_hf_config_read(at("mixtral"), &c, err, sizeof err) == 0 && c.experts == 4 &&
          c.topk == 2 && c.ffn == 8 && c.moe_ffn == 0 && c.aux_loss == 0.01f && c.router == 0);
    CHECK(st_set_open(&s, at("mixtral"), NULL, 0) == 0);
    i = st_set_find(s, "model.layers.1.block_sparse_moe.experts.3.w2.weight", &f);
    CHECK(i >= 0 && f->t[i].shape[0] == 16 && f->t[i].shape[1] == 8);
    i = st_set_find(s, "model.layers.0.block_sparse_moe.experts.0.w3.weight", &f);
    CHECK(i >= 0 && f->t[i].shape[0] == 8 && f->t[i].shape[1] == 16);
    CHECK(st_set_find(s, "model.layers.0.block_sparse_moe.gate.weight", &f) >= 0);
    CHECK(st_set_find(s, "model.layers.0.mlp.gate_proj.weight", &f) < 0);
    st_set_close(s);
    /* what Mixtral has not is not written */
    const char *no[] = { "router=sigmoid", "bias=1", "shared=1" };
    for (int k = 0; k < 3; k++) {
        char spec[256];
        weft_model *m = NULL;
        snprintf(spec, sizeof spec, "llama:vocab=37,ctx=8,layers=1,heads=4,dim=16,ffn=24,"
                 "experts=4,topk=2,%s", no[k]);
        CHECK(weft_model_config_parse(spec, &c) == 0 && weft_model_create(&m, &c, 1) == 0);
        CHECKF(m && weft_model_save_hf(m, at("no"), err, sizeof err) == WEFT_ENOTSUP &&
               strstr(err, no[k]) && access(at("no"), F_OK) != 0, "%s: %s", no[k], err);
        weft_model_destroy(m);
    }
}

/* config.json: what weft reads, and what it refuses naming the field. */
static int config_says(const char *json, char *err, size_t cap, weft_model_config *c)
{
    char d[300];
    snprintf(d, sizeof d, "%s/cfg", dir);
    mkdir(d, 0777);
    FILE *f = fopen(at("cfg/config.json"), "w");
    fputs(json, f);
    fclose(f);
    return weft_hf_config_read(d, c, err, cap);
}

TEST(hf_config_fields)
{
    weft_model_config c;
    char err[512];
    const char *gpt = "{\"architectures\":[\"GPT2LMHeadModel\"],\"vocab_size\":50,"
                      "\"n_positions\":16,\"n_embd\":24,\"n_layer\":3,\"n_head\":4%s}";
    const struct {
        const char *extra, *why; /* why NULL: read */
    } g[] = {
        { "", NULL },
        { ",\"layer_norm_epsilon\":1e-5,\"n_inner\":null,\"activation_function\":\"gelu_new\"",
          NULL },
        { ",\"layer_norm_epsilon\":1e-6", "layer_norm_epsilon" },
        { ",\"activation_function\":\"relu\"", "activation_function" },
        { ",\"n_inner\":64", "n_inner" },
        { ",\"tie_word_embeddings\":false", "tie_word_embeddings" },
        { ",\"scale_attn_by_inverse_layer_idx\":true", "scale_attn_by_inverse_layer_idx" },
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, gpt, g[i].extra);
        int rc = config_says(text, err, sizeof err, &c);
        if (!g[i].why)
            CHECKF(rc == 0 && c.type == WEFT_MODEL_GPT && c.vocab == 50 && c.ctx == 16 &&
                   c.d_model == 24 && c.n_layer == 3 && c.n_head == 4, "%s", err);
        else
            CHECKF(rc != 0 && strstr(err, g[i].why), "%s: rc %d, '%s'", g[i].extra, rc, err);
    }
    CHECK(config_says("{\"model_type\":\"gpt2\",\"vocab_size\":50,\"n_positions\":16,"
                      "\"n_embd\":24,\"n_layer\":3,\"n_head\":5}", err, sizeof err, &c) ==
              WEFT_ENOTSUP && strstr(err, "weft cannot build"));
    CHECK(config_says("{\"model_type\":\"gpt2\",\"vocab_size\":50,\"n_positions\":16,"
                      "\"n_embd\":24,\"n_layer\":2.5,\"n_head\":4}", err, sizeof err, &c) ==
              WEFT_EIO && strstr(err, "\"n_layer\" is not a positive integer"));
    const char *llama = "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":50,"
                        "\"hidden_size\":24,\"intermediate_size\":40,\"num_hidden_layers\":2,"
                        "\"num_attention_heads\":4,\"max_position_embeddings\":16%s}";
    const struct {
        const char *extra, *why;
    } l[] = {
        { ",\"rope_scaling\":null,\"attention_bias\":false,\"hidden_act\":\"silu\"", NULL },
        { ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}", "rope_scaling" },
        { ",\"attention_bias\":true", "attention_bias" },
        { ",\"mlp_bias\":true", "mlp_bias" },
        { ",\"hidden_act\":\"gelu\"", "hidden_act" },
        { ",\"head_dim\":8", "head_dim" },
        { ",\"pretraining_tp\":2", "pretraining_tp" },
    };
    for (size_t i = 0; i < sizeof l / sizeof l[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, llama, l[i].extra);
        int rc = config_says(text, err, sizeof err, &c);
        if (!l[i].why) /* transformers' defaults: kv heads = heads, eps 1e-6, untied */
            CHECKF(rc == 0 && c.type == WEFT_MODEL_LLAMA && c.n_kv_head == 4 && c.ffn == 40 &&
                   c.rms_eps == 1e-6f && c.rope_theta == 10000.0f && c.tied == 0, "%s", err);
        else
            CHECKF(rc == WEFT_ENOTSUP && strstr(err, l[i].why), "%s: rc %d, '%s'", l[i].extra,
                   rc, err);
    }
    /* Mixtral: MixtralConfig's defaults (theta 1e6, eps 1e-5, 8 experts, top 2, aux
     * 0.001) for what it leaves out */
    const char *mix = "{\"architectures\":[\"MixtralForCausalLM\"],\"vocab_size\":50,"
                      "\"max_position_embeddings\":16,\"hidden_size\":24,"
                      "\"intermediate_size\":40,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":4%s}";
    const struct {
        const char *extra, *why;
    } x[] = {
        { "", NULL },
        { ",\"sliding_window\":16,\"router_jitter_noise\":0.0", NULL },
        { ",\"router_jitter_noise\":0.01", "router_jitter_noise" },
        { ",\"sliding_window\":8", "sliding_window" },
        { ",\"num_experts_per_tok\":9", "weft cannot build" },
    };
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, mix, x[i].extra);
        int rc = config_says(text, err, sizeof err, &c);
        if (!x[i].why)
            CHECKF(rc == 0 && c.experts == 8 && c.topk == 2 && c.ffn == 40 &&
                   c.rope_theta == 1e6f && c.rms_eps == 1e-5f && c.aux_loss == 0.001f &&
                   c.capacity == 0.0f && c.router == 0 && c.shared == 0, "%s", err);
        else
            CHECKF(rc != 0 && strstr(err, x[i].why), "%s: rc %d, '%s'", x[i].extra, rc, err);
    }
    CHECK(config_says("{\"architectures\":[\"BertModel\"]}", err, sizeof err, &c) ==
              WEFT_ENOTSUP && strstr(err, "BertModel"));
    CHECK(config_says("{\"vocab_size\":5}", err, sizeof err, &c) == WEFT_EIO &&
          strstr(err, "architectures"));
    CHECK(config_says("{\"model_type\":\"gpt2\",", err, sizeof err, &c) == WEFT_EIO &&
          strstr(err, "offset"));
    /* names both ways */
    weft_model_config_parse("gpt:vocab=50,ctx=16,layers=3,heads=4,dim=24", &c);
    char name[128];
    int tr = -1;
    CHECK(hf_name_of(&c, "blocks.2.mlp.fc.weight", name, sizeof name, &tr) == 0 && tr == 1 &&
          strcmp(name, "transformer.h.2.mlp.c_fc.weight") == 0);
    CHECK(hf_name_of(&c, "blocks.3.mlp.fc.weight", name, sizeof name, &tr) == WEFT_EINVAL);
    CHECK(hf_weft_name(&c, "transformer.h.1.attn.c_attn.bias", name, sizeof name) == 0 &&
          strcmp(name, "blocks.1.attn.qkv.bias") == 0);
    CHECK(hf_weft_name(&c, "transformer.h.01.attn.c_attn.bias", name, sizeof name) < 0);
    CHECK(hf_weft_name(&c, "transformer.h.0.attn.masked_bias", name, sizeof name) == 1);
    CHECK(hf_weft_name(&c, "lm_head.weight", name, sizeof name) == 1);
    weft_model_config_parse("llama:vocab=50,ctx=16,layers=2,heads=4,dim=24,ffn=40", &c);
    CHECK(hf_weft_name(&c, "lm_head.weight", name, sizeof name) == 0 &&
          strcmp(name, "lm_head.weight") == 0);
    CHECK(hf_name_of(&c, "blocks.1.mlp.down.weight", name, sizeof name, &tr) == 0 && tr == 0 &&
          strcmp(name, "model.layers.1.mlp.down_proj.weight") == 0);
    /* Mixtral's: a stack's pieces, the expert numbered below experts */
    weft_model_config_parse("llama:vocab=50,ctx=16,layers=2,heads=4,dim=24,ffn=40,experts=3,"
                            "topk=2", &c);
    int np = 0;
    CHECK(hf_name_of(&c, "blocks.1.mlp.experts.gate_up.weight", name, sizeof name, &tr) ==
          WEFT_EINVAL);
    CHECK(hf_piece_name(&c, "blocks.1.mlp.experts.gate_up.weight", 3, name, sizeof name, &tr,
                        &np) == 0 && np == 6 && tr == 0 &&
          strcmp(name, "model.layers.1.block_sparse_moe.experts.1.w3.weight") == 0);
    CHECK(hf_piece_name(&c, "blocks.0.mlp.experts.down.weight", 2, name, sizeof name, &tr,
                        &np) == 0 && np == 3 &&
          strcmp(name, "model.layers.0.block_sparse_moe.experts.2.w2.weight") == 0);
    CHECK(hf_piece_name(&c, "blocks.0.mlp.experts.down.weight", 3, name, sizeof name, &tr,
                        &np) == WEFT_EINVAL);
    CHECK(hf_name_of(&c, "blocks.0.mlp.router.weight", name, sizeof name, &tr) == 0 &&
          strcmp(name, "model.layers.0.block_sparse_moe.gate.weight") == 0);
    CHECK(hf_name_of(&c, "blocks.0.mlp.gate.weight", name, sizeof name, &tr) == WEFT_EINVAL);
    CHECK(hf_weft_name(&c, "model.layers.1.block_sparse_moe.experts.2.w1.weight", name,
                       sizeof name) == 0 &&
          strcmp(name, "blocks.1.mlp.experts.gate_up.weight") == 0);
    CHECK(hf_weft_name(&c, "model.layers.1.block_sparse_moe.experts.3.w1.weight", name,
                       sizeof name) < 0);
    CHECK(hf_weft_name(&c, "model.layers.1.block_sparse_moe.experts.01.w2.weight", name,
                       sizeof name) < 0);
    CHECK(hf_weft_name(&c, "model.layers.0.mlp.up_proj.weight", name, sizeof name) < 0);
}
