/* Multi-phase runs (see phases.h): the views of the run's config per phase, the table of source
 * positions, and the trainer's side (trainer.h): switching phases at the start of a step, the
 * phase record of a checkpoint and resuming in the phase it names. */
#include "train/phases.h"
#include "base/err.h"
#include "base/fileio.h"
#include "train/settings.h"
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The run's config as phase p sees it. */
static void make_view(zy_train_config *v, const zy_train_config *run, const zy_phase *p) {
    *v = *run;
    v->batch_size = p->batch_size;
    v->seq_len = p->seq_len;
    v->n_sources = p->n_sources;
    memcpy(v->sources, p->sources, sizeof v->sources);
    for (int t = 0; t < 2; t++) v->model.rope[t].theta = p->rope_theta[t];
    if (p->given & ZY_PHASE_HAS_SCHEDULE) {
        v->schedule = p->schedule;
        v->schedule_start = p->first_step;
    }
}

/* Every source of every phase, nothing drawn yet. */
static void table_reset(zy_phases *ph) {
    ph->n_paths = 0;
    for (int i = 0; i < ph->n; i++)
        for (int s = 0; s < ph->views[i].n_sources; s++) {
            const char *path = ph->views[i].sources[s].path;
            if (phases_source(ph, path) >= 0) continue;
            snprintf(ph->paths[ph->n_paths], ZY_PATH_MAX, "%s", path);
            ph->tokens[ph->n_paths++] = 0;
        }
}

void phases_init(zy_phases *ph, const zy_train_config *run) {
    memset(ph, 0, sizeof *ph);
    ph->run = run;
    ph->phased = run->n_phases > 0;
    ph->n = ph->phased ? run->n_phases : 1;
    ph->views = zy_calloc((size_t)ph->n, sizeof *ph->views);
    ph->paths = zy_calloc(ZY_MAX_RUN_SOURCES, sizeof *ph->paths);
    ph->tokens = zy_calloc(ZY_MAX_RUN_SOURCES, sizeof *ph->tokens);
    for (int i = 0; i < ph->n; i++) {
        if (ph->phased)
            make_view(&ph->views[i], run, &run->phases[i]);
        else
            ph->views[i] = *run;
    }
    table_reset(ph);
}

void phases_free(zy_phases *ph) {
    free(ph->views);
    free(ph->paths);
    free(ph->tokens);
    memset(ph, 0, sizeof *ph);
}

int phases_at(const zy_phases *ph, int64_t step) {
    if (!ph->phased) return 0;
    for (int i = 0; i < ph->n; i++) {
        const zy_phase *p = &ph->run->phases[i];
        if (step < p->first_step + p->steps) return i;
    }
    return ph->n - 1;
}

float phases_lr(const zy_phases *ph, int64_t step) {
    const zy_train_config *v = &ph->views[ph->current];
    return schedule_lr(&v->schedule, step - v->schedule_start);
}

int phases_source(const zy_phases *ph, const char *path) {
    for (int i = 0; i < ph->n_paths; i++)
        if (!strcmp(ph->paths[i], path)) return i;
    return -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* The trainer's side */

/* The current phase's sources' positions into the table; *rows = the rows its stream drew. */
static void note_positions(const trainer *tr, zy_phases *ph, uint64_t *rows) {
    const zy_train_config *v = tr->cfg;
    uint64_t drawn[ZY_MAX_SOURCES];
    batches_position(tr->train, rows, drawn);
    for (int s = 0; s < v->n_sources; s++)
        ph->tokens[phases_source(ph, v->sources[s].path)] = drawn[s] * (uint64_t)v->seq_len;
}

/* Makes phase p current: the step's batch shape, the RoPE bases of the model (which checkpoints
 * carry in config.json), and its data, each source at its position in the table and the mixture's
 * draws after the `rows` drawn so far. */
static int open_phase(trainer *tr, int p, uint64_t rows) {
    zy_phases *ph = &tr->phases;
    const zy_train_config *v = &ph->views[p];
    const int world = tr->ranks.comm.world;
    batches_close(tr->train);
    batches_close(tr->val);
    tr->train = tr->val = NULL;
    ZY_TRY(step_reshape(&tr->st, v->batch_size / world, v->seq_len));
    ZY_TRY(batches_open(&tr->train, v, 0, v->seed));
    ZY_TRY(batches_set_slice(tr->train, tr->ranks.comm.rank, world));
    if (batches_max_token(tr->train) >= tr->st.model.cfg.vocab_size)
        return zy_fail("phases[%d]: the training data holds token id %d but the model's "
                       "vocabulary is %d",
                       p, batches_max_token(tr->train), tr->st.model.cfg.vocab_size);
    /* as the first phase's data is checked at start-up: written by the run's tokenizer */
    if (v->tokenizer[0] && batches_check_tokenizer(tr->train, v->tokenizer, "tokenizer") != ZY_OK)
        return zy_fail_ctx("phases[%d]", p);
    uint64_t drawn[ZY_MAX_SOURCES];
    for (int s = 0; s < v->n_sources; s++) {
        const uint64_t tokens = ph->tokens[phases_source(ph, v->sources[s].path)];
        drawn[s] = (tokens + (uint64_t)v->seq_len - 1) / (uint64_t)v->seq_len;
    }
    ZY_TRY(batches_seek(tr->train, rows, drawn));
    for (int t = 0; t < 2; t++) tr->st.model.cfg.rope[t].theta = v->model.rope[t].theta;
    tr->cfg = v;
    ph->current = p;
    return ZY_OK;
}

/* "phases[1] \"mix\"" */
static void phase_label(const zy_phases *ph, int p, char *out, size_t n) {
    const char *name = ph->run->phases[p].name;
    snprintf(out, n, "phases[%d]%s%s%s", p, name[0] ? " \"" : "", name, name[0] ? "\"" : "");
}

int trainer_phases_check(const trainer *tr) {
    const zy_phases *ph = &tr->phases;
    const int world = tr->ranks.comm.world;
    for (int p = 0; p < ph->n; p++) {
        const zy_train_config *v = &ph->views[p];
        if (v->batch_size % world)
            return zy_fail("%sbatch_size %d (the global batch) cannot be split over %d ranks: make "
                           "it a multiple of %d",
                           ph->phased ? "phases: " : "", v->batch_size, world, world);
        /* a later phase's data fails here, not hours in (the first phase's opens at once) */
        for (int s = 0; ph->phased && s < v->n_sources; s++)
            if (!zy_path_exists(v->sources[s].path))
                return zy_fail("%s: no such data source (phases[%d].data)", v->sources[s].path, p);
    }
    return ZY_OK;
}

int trainer_phase_begin_step(trainer *tr) {
    zy_phases *ph = &tr->phases;
    const int p = phases_at(ph, tr->st.step);
    if (p == ph->current) return ZY_OK;
    uint64_t rows;
    note_positions(tr, ph, &rows);
    ZY_TRY(open_phase(tr, p, rows));
    const zy_train_config *v = tr->cfg;
    char label[64];
    phase_label(ph, p, label, sizeof label);
    printf("phase %d/%d (%s) from step %lld: %d x %d tokens per micro-batch, %d source%s, rope "
           "theta %g (hybrid) %g (hybrid_sliding)\n",
           p + 1, ph->n, label, (long long)tr->st.step + 1, v->batch_size, v->seq_len, v->n_sources,
           v->n_sources == 1 ? "" : "s", v->model.rope[0].theta, v->model.rope[1].theta);
    return ZY_OK;
}

static cJSON *u64_str(uint64_t x) {
    char s[32];
    snprintf(s, sizeof s, "%" PRIu64, x);
    return cJSON_CreateString(s);
}

/* The config's phases [0, upto] as the resolved config writes them (a new array). */
static cJSON *phases_json(const zy_phases *ph, int upto) {
    cJSON *all = settings_to_json(ph->run);
    cJSON *list = cJSON_DetachItemFromObject(all, "phases");
    cJSON_Delete(all);
    while (cJSON_GetArraySize(list) > upto + 1)
        cJSON_DeleteItemFromArray(list, cJSON_GetArraySize(list) - 1);
    return list;
}

void trainer_phases_save(const trainer *tr, cJSON *state) {
    spike_save(&tr->st.spike, state); /* rides this hook: see trainer.h */
    const zy_phases *ph = &tr->phases;
    if (!ph->phased) return;
    zy_phases tmp = *ph; /* the table as it stands, with the current phase's positions in it */
    tmp.tokens = zy_malloc(ZY_MAX_RUN_SOURCES * sizeof *tmp.tokens);
    memcpy(tmp.tokens, ph->tokens, ZY_MAX_RUN_SOURCES * sizeof *tmp.tokens);
    uint64_t rows;
    note_positions(tr, &tmp, &rows);
    const zy_phase *p = &ph->run->phases[ph->current];
    cJSON *o = cJSON_AddObjectToObject(state, "phases");
    cJSON_AddNumberToObject(o, "index", ph->current);
    cJSON_AddNumberToObject(o, "step_in_phase", (double)(tr->st.step - p->first_step));
    cJSON_AddItemToObject(o, "rows", u64_str(rows));
    cJSON *pos = cJSON_AddArrayToObject(o, "positions");
    for (int i = 0; i < tmp.n_paths; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", tmp.paths[i]);
        cJSON_AddItemToObject(e, "tokens", u64_str(tmp.tokens[i]));
        cJSON_AddItemToArray(pos, e);
    }
    cJSON_AddItemToObject(o, "ran", phases_json(ph, ph->current));
    free(tmp.tokens);
}

static int get_u64(const cJSON *v, const char *what, const char *path, uint64_t *out) {
    char *end;
    errno = 0;
    if (!cJSON_IsString(v) || !v->valuestring[0] ||
        (*out = strtoull(v->valuestring, &end, 10), errno || *end))
        return zy_fail("%s: phases.%s should be an integer in a string", path, what);
    return ZY_OK;
}

/* The differences between two values under key ("phases" lists, or one phase as "phases[2]"), on
 * one line: "phases[0].seq_len: 64 -> 128; ...". */
static int phases_diff(const cJSON *was, const cJSON *now, const char *key, char *out, size_t n) {
    cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
    cJSON_AddItemToObject(a, key, cJSON_Duplicate(was, 1));
    cJSON_AddItemToObject(b, key, cJSON_Duplicate(now, 1));
    char *ta = cJSON_PrintUnformatted(a), *tb = cJSON_PrintUnformatted(b), lines[2048];
    const int count = train_config_diff(ta, tb, lines, sizeof lines);
    free(ta);
    free(tb);
    cJSON_Delete(a);
    cJSON_Delete(b);
    size_t k = 0; /* "  k: a -> b\n  ..." as "k: a -> b; ..." */
    for (const char *c = lines; *c && k + 3 < n; c++) {
        if (c[0] == ' ' && (c == lines || c[-1] == '\n')) {
            c++;
            continue;
        }
        if (*c != '\n')
            out[k++] = *c;
        else if (c[1])
            out[k++] = ';', out[k++] = ' ';
    }
    out[k] = 0;
    return count;
}

/* The phase the checkpoint was in, checked against the config: what already ran must be what the
 * config says (else the checkpoint is of another run); the phase it is in may change (reported),
 * except to end before where the checkpoint is. *exact: the phase still reads the same stream
 * (same batch, seq_len and sources), so the saved loader position applies as it is. */
static int resume_phase(trainer *tr, const cJSON *rec, const char *path, int *exact) {
    zy_phases *ph = &tr->phases;
    const cJSON *idx = cJSON_GetObjectItemCaseSensitive(rec, "index");
    const cJSON *sip = cJSON_GetObjectItemCaseSensitive(rec, "step_in_phase");
    const cJSON *ran = cJSON_GetObjectItemCaseSensitive(rec, "ran");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(rec, "positions");
    if (!cJSON_IsNumber(idx) || idx->valuedouble < 0 || idx->valuedouble >= ZY_MAX_PHASES ||
        !cJSON_IsNumber(sip) || sip->valuedouble < 0 || !cJSON_IsArray(ran) ||
        cJSON_GetArraySize(ran) != idx->valueint + 1 || !cJSON_IsArray(pos))
        return zy_fail("%s: \"phases\" should hold index, step_in_phase, rows, positions and ran "
                       "(the phases up to index)",
                       path);
    const int p = idx->valueint;
    const int64_t in_phase = (int64_t)sip->valuedouble;
    if (p >= ph->n)
        return zy_fail("%s: the checkpoint is in phases[%d] but the config lists %d phase%s: "
                       "put the phases that ran back (out_dir/train_config.json has them)",
                       path, p, ph->n, ph->n == 1 ? "" : "s");
    char diff[2048];
    cJSON *now = phases_json(ph, p);
    cJSON *was_done = cJSON_Duplicate(ran, 1), *now_done = cJSON_Duplicate(now, 1);
    cJSON_DeleteItemFromArray(was_done, p);
    cJSON_DeleteItemFromArray(now_done, p);
    int changed = phases_diff(was_done, now_done, "phases", diff, sizeof diff);
    cJSON_Delete(was_done);
    cJSON_Delete(now_done);
    if (changed) {
        cJSON_Delete(now);
        return zy_fail("%s: the config changed phases that already ran (%s): the checkpoint "
                       "cannot continue a run that did not happen; restore them (out_dir/"
                       "train_config.json has them) or start over with --overwrite",
                       path, diff);
    }
    const zy_phase *cp = &ph->run->phases[p];
    if (cp->first_step + in_phase != tr->st.step) {
        cJSON_Delete(now);
        return zy_fail("%s: the checkpoint is step %lld, %lld steps into phases[%d], but the "
                       "config's phases before it now add up to %lld steps (a phase given in "
                       "tokens with another grad_accum?)",
                       path, (long long)tr->st.step, (long long)in_phase, p,
                       (long long)cp->first_step);
    }
    if (cp->steps < in_phase) {
        cJSON_Delete(now);
        return zy_fail("%s: the checkpoint is %lld steps into phases[%d] but the config makes "
                       "that phase %lld steps long: it cannot end before where the run is",
                       path, (long long)in_phase, p, (long long)cp->steps);
    }
    /* the phase it is in: what changed applies from here on */
    const cJSON *was_p = cJSON_GetArrayItem(ran, p), *now_p = cJSON_GetArrayItem(now, p);
    char key[32];
    snprintf(key, sizeof key, "phases[%d]", p);
    changed = phases_diff(was_p, now_p, key, diff, sizeof diff);
    *exact = 1;
    static const char *const stream_keys[] = {"batch_size", "seq_len", "data"};
    for (int k = 0; k < 3; k++)
        *exact &= cJSON_Compare(cJSON_GetObjectItemCaseSensitive(was_p, stream_keys[k]),
                                cJSON_GetObjectItemCaseSensitive(now_p, stream_keys[k]), 1);
    cJSON_Delete(now);
    if (changed)
        printf("resume: the phase the checkpoint is in changed (%s); it applies from step %lld%s\n",
               diff, (long long)tr->st.step + 1,
               *exact ? "" : " (each source continues from its saved position)");
    /* the table of positions, then the phase over it */
    table_reset(ph);
    const cJSON *e;
    cJSON_ArrayForEach(e, pos) {
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(e, "path");
        uint64_t tokens;
        if (!cJSON_IsString(pp))
            return zy_fail("%s: phases.positions[] should be {\"path\", \"tokens\"}", path);
        ZY_TRY(get_u64(cJSON_GetObjectItemCaseSensitive(e, "tokens"), "positions[].tokens", path,
                       &tokens));
        const int k = phases_source(ph, pp->valuestring);
        if (k >= 0) ph->tokens[k] = tokens; /* a source the config dropped keeps nothing */
    }
    uint64_t rows;
    ZY_TRY(get_u64(cJSON_GetObjectItemCaseSensitive(rec, "rows"), "rows", path, &rows));
    char label[64];
    phase_label(ph, p, label, sizeof label);
    printf("resume: in phase %d/%d (%s), step %lld of its %lld\n", p + 1, ph->n, label,
           (long long)in_phase, (long long)cp->steps);
    return open_phase(tr, p, rows);
}

int trainer_phases_resume(trainer *tr, const cJSON *state, const char *path) {
    const zy_phases *ph = &tr->phases;
    const cJSON *loader = cJSON_GetObjectItemCaseSensitive(state, "train_loader");
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(state, "phases");
    if (!loader) return zy_fail("%s: missing \"train_loader\"", path);
    if (!rec && ph->phased)
        return zy_fail("%s: the checkpoint is of a run without phases but the config lists %d: "
                       "phases cannot be added to a run under way (--overwrite starts over; "
                       "init_from starts from a checkpoint's weights)",
                       path, ph->n);
    if (rec && !ph->phased)
        return zy_fail("%s: the checkpoint is of a run with phases but the config lists none: "
                       "put them back (out_dir/train_config.json has them)",
                       path);
    int exact = 1;
    if (rec) ZY_TRY(resume_phase(tr, rec, path, &exact));
    if (!exact) return ZY_OK; /* open_phase placed each source */
    char *lj = cJSON_PrintUnformatted(loader);
    const int rc = batches_restore(tr->train, lj, path);
    free(lj);
    return rc;
}
