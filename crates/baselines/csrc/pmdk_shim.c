/*
 * PMDK (libpmemobj) baseline of Ferrite's benchmarks: a persistent B+-tree of 8-byte keys and
 * variable-size values per table, in one pmemobj pool.
 *
 * Every write path runs a *whole* batch of operations inside one TX_BEGIN ... TX_END, so the
 * setjmp/longjmp of libpmemobj transactions never crosses a Rust frame: Rust calls
 * fb_pmdk_apply() once per transaction and gets a status back. Reads (get, scan, count) take no
 * transaction. Concurrency is the caller's job: the Rust wrapper holds a reader-writer lock
 * (writers exclusive), so the tree is never read while it is being modified. The allocator
 * benchmark's one-slot entry points (fb_pmdk_bench_alloc_one, fb_pmdk_bench_free_one) take no
 * lock: the wrapper claims a slot before calling them, and libpmemobj's allocator is
 * thread-safe.
 *
 * The tree: nodes of FB_ORDER entries. Interior node: sorted keys[0..n), children ptrs[0..n],
 * child i holds keys in [keys[i-1], keys[i]). Leaf: keys[0..n) and their values ptrs[0..n),
 * *unsorted* (as in FPTree and NV-Tree; the keys stay contiguous, so a lookup scans 4 cache
 * lines), `next` the right sibling; every key of a leaf is below every key of the next.
 * An insert appends at slot n: that slot is unreachable until n grows, so it is added to the
 * transaction without a snapshot (POBJ_XADD_NO_SNAPSHOT: flushed at commit) and only n (8
 * bytes) is undo-logged; with the transactional allocation of the value, an insert is exactly
 * "alloc + slot update". A delete moves the last entry into the hole (undo-logs that slot and
 * n). Full nodes are split on the way down (a leaf split sorts the leaf), so a parent always
 * has room. Leaves are never merged (they may become empty; lookups and scans skip them). A
 * value object is {len, bytes}; an update of the same length overwrites it in place after
 * snapshotting it, a different length allocates a new object.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpmem.h>
#include <libpmemobj.h>

#define FB_ORDER 32
#define FB_MAX_TABLES 16
#define FB_LAYOUT "ferrite-bench-btree"
#define FB_TYPE_NODE 1
#define FB_TYPE_VALUE 2

struct fb_entry {
	uint64_t key;
	PMEMoid val;
};

struct fb_node {
	uint64_t leaf;
	uint64_t n;
	PMEMoid next;
	uint64_t keys[FB_ORDER];
	PMEMoid ptrs[FB_ORDER + 1];
};

struct fb_value {
	uint64_t len;
	unsigned char data[];
};

struct fb_root {
	uint64_t ntables;
	PMEMoid trees[FB_MAX_TABLES];
};

typedef struct fb_pool {
	PMEMobjpool *pop;
	PMEMoid root;
	uint32_t ntables;
	/* Allocator benchmark: a persistent array of PMEMoid slots (fb_pmdk_bench_slots). */
	PMEMoid bench;
	uint64_t bench_n;
} fb_pool;

/* One operation of a write batch. */
typedef struct fb_op {
	uint32_t kind; /* 1 insert, 2 update, 3 delete */
	uint32_t table;
	uint64_t key;
	const unsigned char *val;
	uint64_t len;
} fb_op;

enum { FB_INSERT = 1, FB_UPDATE = 2, FB_DELETE = 3 };

static void fb_err(char *err, size_t errlen, const char *what, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s: %s", what, msg ? msg : "unknown error");
}

static inline struct fb_node *N(PMEMoid oid) { return (struct fb_node *)pmemobj_direct(oid); }

static inline struct fb_root *R(const fb_pool *p) { return (struct fb_root *)pmemobj_direct(p->root); }

#define KEY_OFF(i) (offsetof(struct fb_node, keys) + (uint64_t)(i) * sizeof(uint64_t))
#define PTR_OFF(i) (offsetof(struct fb_node, ptrs) + (uint64_t)(i) * sizeof(PMEMoid))

/* Interior node: number of keys <= key (the child to descend into). */
static uint64_t child_index(const struct fb_node *x, uint64_t key)
{
	uint64_t lo = 0, hi = x->n;
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		if (x->keys[mid] <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Leaf: the slot holding key, or -1. */
static int64_t leaf_find(const struct fb_node *x, uint64_t key)
{
	for (uint64_t i = 0; i < x->n; i++)
		if (x->keys[i] == key)
			return (int64_t)i;
	return -1;
}

static PMEMoid find_leaf(PMEMoid node, uint64_t key)
{
	struct fb_node *x = N(node);
	while (!x->leaf) {
		node = x->ptrs[child_index(x, key)];
		x = N(node);
	}
	return node;
}

static void sort_entries(struct fb_entry *e, uint64_t n)
{
	for (uint64_t i = 1; i < n; i++) {
		struct fb_entry v = e[i];
		uint64_t j = i;
		while (j > 0 && e[j - 1].key > v.key) {
			e[j] = e[j - 1];
			j--;
		}
		e[j] = v;
	}
}

/* ---- transactional helpers (call only inside TX_BEGIN; failures abort the transaction) ---- */

static PMEMoid new_node(int leaf)
{
	PMEMoid oid = pmemobj_tx_zalloc(sizeof(struct fb_node), FB_TYPE_NODE);
	N(oid)->leaf = (uint64_t)leaf;
	return oid;
}

static PMEMoid new_value(const unsigned char *val, uint64_t len)
{
	PMEMoid oid = pmemobj_tx_alloc(sizeof(struct fb_value) + len, FB_TYPE_VALUE);
	struct fb_value *v = (struct fb_value *)pmemobj_direct(oid);
	/* A fresh allocation is flushed at commit by libpmemobj; no snapshot needed. */
	v->len = len;
	if (len)
		memcpy(v->data, val, len);
	return oid;
}

static void add_n(PMEMoid oid)
{
	pmemobj_tx_add_range(oid, offsetof(struct fb_node, n), sizeof(uint64_t));
}

/* Splits the full child `i` of the non-full interior node `parent`. */
static void split_child(PMEMoid parent, uint64_t i)
{
	struct fb_node *p = N(parent);
	PMEMoid child = p->ptrs[i];
	struct fb_node *c = N(child);
	PMEMoid sib = new_node((int)c->leaf);
	struct fb_node *s = N(sib);
	uint64_t mid = FB_ORDER / 2;
	uint64_t sep;

	pmemobj_tx_add_range(child, 0, sizeof(struct fb_node));
	if (c->leaf) {
		uint64_t moved = FB_ORDER - mid;
		struct fb_entry e[FB_ORDER];
		for (uint64_t j = 0; j < c->n; j++) {
			e[j].key = c->keys[j];
			e[j].val = c->ptrs[j];
		}
		sort_entries(e, c->n);
		for (uint64_t j = 0; j < mid; j++) {
			c->keys[j] = e[j].key;
			c->ptrs[j] = e[j].val;
		}
		for (uint64_t j = 0; j < moved; j++) {
			s->keys[j] = e[mid + j].key;
			s->ptrs[j] = e[mid + j].val;
		}
		s->n = moved;
		s->next = c->next;
		c->next = sib;
		c->n = mid;
		sep = s->keys[0];
	} else {
		uint64_t moved = FB_ORDER - mid - 1;
		sep = c->keys[mid];
		memcpy(s->keys, &c->keys[mid + 1], moved * sizeof(uint64_t));
		memcpy(s->ptrs, &c->ptrs[mid + 1], (moved + 1) * sizeof(PMEMoid));
		s->n = moved;
		c->n = mid;
	}
	add_n(parent);
	pmemobj_tx_add_range(parent, KEY_OFF(i), (p->n - i + 1) * sizeof(uint64_t));
	pmemobj_tx_add_range(parent, PTR_OFF(i + 1), (p->n - i + 1) * sizeof(PMEMoid));
	memmove(&p->keys[i + 1], &p->keys[i], (p->n - i) * sizeof(uint64_t));
	memmove(&p->ptrs[i + 2], &p->ptrs[i + 1], (p->n - i) * sizeof(PMEMoid));
	p->keys[i] = sep;
	p->ptrs[i + 1] = sib;
	p->n += 1;
}

static int tx_insert(fb_pool *pool, uint32_t t, uint64_t key, const unsigned char *val,
		     uint64_t len)
{
	struct fb_root *r = R(pool);
	PMEMoid node = r->trees[t];
	struct fb_node *x = N(node);

	if (x->leaf ? leaf_find(x, key) >= 0 : 0)
		return EEXIST;
	if (x->n == FB_ORDER) {
		PMEMoid root = new_node(0);
		N(root)->ptrs[0] = node;
		split_child(root, 0);
		pmemobj_tx_add_range(pool->root,
				     offsetof(struct fb_root, trees) + t * sizeof(PMEMoid),
				     sizeof(PMEMoid));
		r->trees[t] = root;
		node = root;
		x = N(node);
	}
	while (!x->leaf) {
		uint64_t i = child_index(x, key);
		if (N(x->ptrs[i])->n == FB_ORDER) {
			struct fb_node *c = N(x->ptrs[i]);
			if (c->leaf && leaf_find(c, key) >= 0)
				return EEXIST;
			split_child(node, i);
			if (key >= x->keys[i])
				i++;
		}
		node = x->ptrs[i];
		x = N(node);
	}
	if (leaf_find(x, key) >= 0)
		return EEXIST;
	PMEMoid v = new_value(val, len);
	/* Slot n is beyond the leaf's count: unreachable until n grows, so no undo log. */
	pmemobj_tx_xadd_range(node, KEY_OFF(x->n), sizeof(uint64_t), POBJ_XADD_NO_SNAPSHOT);
	pmemobj_tx_xadd_range(node, PTR_OFF(x->n), sizeof(PMEMoid), POBJ_XADD_NO_SNAPSHOT);
	x->keys[x->n] = key;
	x->ptrs[x->n] = v;
	add_n(node);
	x->n += 1;
	return 0;
}

static int tx_update(fb_pool *pool, uint32_t t, uint64_t key, const unsigned char *val,
		     uint64_t len)
{
	PMEMoid leaf = find_leaf(R(pool)->trees[t], key);
	struct fb_node *x = N(leaf);
	int64_t i = leaf_find(x, key);
	if (i < 0)
		return ENOENT;
	PMEMoid old = x->ptrs[i];
	struct fb_value *v = (struct fb_value *)pmemobj_direct(old);
	if (v->len == len) {
		pmemobj_tx_add_range(old, offsetof(struct fb_value, data), len);
		memcpy(v->data, val, len);
	} else {
		PMEMoid nv = new_value(val, len);
		pmemobj_tx_add_range(leaf, PTR_OFF(i), sizeof(PMEMoid));
		x->ptrs[i] = nv;
		pmemobj_tx_free(old);
	}
	return 0;
}

static int tx_delete(fb_pool *pool, uint32_t t, uint64_t key)
{
	PMEMoid leaf = find_leaf(R(pool)->trees[t], key);
	struct fb_node *x = N(leaf);
	int64_t i = leaf_find(x, key);
	if (i < 0)
		return ENOENT;
	PMEMoid old = x->ptrs[i];
	uint64_t last = x->n - 1;
	if ((uint64_t)i != last) {
		pmemobj_tx_add_range(leaf, KEY_OFF(i), sizeof(uint64_t));
		pmemobj_tx_add_range(leaf, PTR_OFF(i), sizeof(PMEMoid));
		x->keys[i] = x->keys[last];
		x->ptrs[i] = x->ptrs[last];
	}
	add_n(leaf);
	x->n -= 1;
	pmemobj_tx_free(old);
	return 0;
}

/* ---- the API called from Rust ---- */

const char *fb_pmdk_check_version(void)
{
	return pmemobj_check_version(PMEMOBJ_MAJOR_VERSION, PMEMOBJ_MINOR_VERSION);
}

/*
 * Creates a pool file of `size` bytes at `path` (which must not exist), prefaulted at creation,
 * with `ntables` empty trees. Returns 0 and sets *out, or an errno and fills `err`.
 */
int fb_pmdk_create(const char *path, uint64_t size, uint32_t ntables, fb_pool **out, char *err,
		   size_t errlen)
{
	if (ntables == 0 || ntables > FB_MAX_TABLES) {
		fb_err(err, errlen, "create", "between 1 and 16 tables");
		return EINVAL;
	}
	int one = 1;
	if (pmemobj_ctl_set(NULL, "prefault.at_create", &one) != 0) {
		fb_err(err, errlen, "ctl prefault.at_create", pmemobj_errormsg());
		return errno ? errno : EINVAL;
	}
	PMEMobjpool *pop = pmemobj_create(path, FB_LAYOUT, (size_t)size, 0600);
	if (pop == NULL) {
		int e = errno ? errno : EINVAL;
		fb_err(err, errlen, "pmemobj_create", pmemobj_errormsg());
		return e;
	}
	PMEMoid root = pmemobj_root(pop, sizeof(struct fb_root));
	if (OID_IS_NULL(root)) {
		int e = errno ? errno : ENOMEM;
		fb_err(err, errlen, "pmemobj_root", pmemobj_errormsg());
		pmemobj_close(pop);
		return e;
	}
	/* volatile: written inside TX_BEGIN and read after a possible longjmp to TX_ONABORT. */
	volatile int status = 0;
	TX_BEGIN(pop) {
		struct fb_root *r = (struct fb_root *)pmemobj_direct(root);
		pmemobj_tx_add_range(root, 0, sizeof(struct fb_root));
		r->ntables = ntables;
		for (uint32_t t = 0; t < ntables; t++)
			r->trees[t] = new_node(1);
	} TX_ONABORT {
		status = errno ? errno : EIO;
		fb_err(err, errlen, "create trees", pmemobj_errormsg());
	} TX_END
	if (status != 0) {
		pmemobj_close(pop);
		return status;
	}
	fb_pool *p = (fb_pool *)malloc(sizeof(fb_pool));
	if (p == NULL) {
		pmemobj_close(pop);
		fb_err(err, errlen, "malloc", "out of memory");
		return ENOMEM;
	}
	p->pop = pop;
	p->root = root;
	p->ntables = ntables;
	p->bench = OID_NULL;
	p->bench_n = 0;
	*out = p;
	return 0;
}

void fb_pmdk_close(fb_pool *p)
{
	if (p) {
		pmemobj_close(p->pop);
		free(p);
	}
}

/* Whether libpmem treats the pool's memory as persistent memory (flush with CLWB etc.). */
int fb_pmdk_is_pmem(const fb_pool *p)
{
	return pmem_is_pmem(pmemobj_direct(p->root), sizeof(struct fb_root));
}

/* 1 if table t holds key, 0 if not, -1 for a bad table. */
int fb_pmdk_contains(const fb_pool *p, uint32_t t, uint64_t key)
{
	if (t >= p->ntables)
		return -1;
	return leaf_find(N(find_leaf(R(p)->trees[t], key)), key) >= 0;
}

/*
 * Copies the value of `key` into buf (capacity cap) and its length into *len.
 * Returns 1 found (and copied if it fits: check *len <= cap), 0 not found, -1 bad table.
 */
int fb_pmdk_get(const fb_pool *p, uint32_t t, uint64_t key, unsigned char *buf, uint64_t cap,
		uint64_t *len)
{
	if (t >= p->ntables)
		return -1;
	struct fb_node *x = N(find_leaf(R(p)->trees[t], key));
	int64_t i = leaf_find(x, key);
	if (i < 0)
		return 0;
	const struct fb_value *v = (const struct fb_value *)pmemobj_direct(x->ptrs[i]);
	*len = v->len;
	if (v->len <= cap && v->len)
		memcpy(buf, v->data, v->len);
	return 1;
}

/*
 * Copies up to `limit` entries with key >= start, in key order: keys[i], lens[i], and the
 * values back to back into data (capacity cap). Returns the number of entries copied; if the
 * next entry's value does not fit, stops there and sets *more to 1 (the caller grows the buffer
 * and resumes after the last key copied). -1 for a bad table.
 */
int64_t fb_pmdk_scan(const fb_pool *p, uint32_t t, uint64_t start, uint64_t limit,
		     uint64_t *keys, uint64_t *lens, unsigned char *data, uint64_t cap, int *more)
{
	*more = 0;
	if (t >= p->ntables)
		return -1;
	struct fb_node *x = N(find_leaf(R(p)->trees[t], start));
	uint64_t n = 0, used = 0;
	struct fb_entry sorted[FB_ORDER];
	while (x != NULL && n < limit) {
		uint64_t m = 0;
		for (uint64_t i = 0; i < x->n; i++)
			if (x->keys[i] >= start) {
				sorted[m].key = x->keys[i];
				sorted[m].val = x->ptrs[i];
				m++;
			}
		sort_entries(sorted, m);
		for (uint64_t i = 0; i < m && n < limit; i++) {
			const struct fb_value *v = (const struct fb_value *)pmemobj_direct(sorted[i].val);
			if (used + v->len > cap) {
				*more = 1;
				return (int64_t)n;
			}
			keys[n] = sorted[i].key;
			lens[n] = v->len;
			if (v->len)
				memcpy(data + used, v->data, v->len);
			used += v->len;
			n++;
		}
		x = OID_IS_NULL(x->next) ? NULL : N(x->next);
	}
	return (int64_t)n;
}

/* Number of entries of table t (walks the leaves), or UINT64_MAX for a bad table. */
uint64_t fb_pmdk_count(const fb_pool *p, uint32_t t)
{
	if (t >= p->ntables)
		return UINT64_MAX;
	struct fb_node *x = N(R(p)->trees[t]);
	while (!x->leaf)
		x = N(x->ptrs[0]);
	uint64_t n = 0;
	for (;;) {
		n += x->n;
		if (OID_IS_NULL(x->next))
			break;
		x = N(x->next);
	}
	return n;
}

/*
 * Applies `n` operations as one pmemobj transaction: all or nothing. Returns 0 on commit;
 * EEXIST / ENOENT if an insert met an existing key or an update/delete a missing one (the
 * caller checks first, so this means a bug), ENOMEM if the pool is full, another errno for other
 * failures; on any error the transaction is rolled back and `err` says why.
 */
int fb_pmdk_apply(fb_pool *p, const fb_op *ops, size_t n, char *err, size_t errlen)
{
	/* volatile: written inside TX_BEGIN and read after a possible longjmp to TX_ONABORT. */
	volatile int status = 0;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].table >= p->ntables || ops[i].kind < FB_INSERT || ops[i].kind > FB_DELETE) {
			fb_err(err, errlen, "apply", "bad table or operation");
			return EINVAL;
		}
	}
	TX_BEGIN(p->pop) {
		for (size_t i = 0; i < n && status == 0; i++) {
			const fb_op *o = &ops[i];
			switch (o->kind) {
			case FB_INSERT:
				status = tx_insert(p, o->table, o->key, o->val, o->len);
				break;
			case FB_UPDATE:
				status = tx_update(p, o->table, o->key, o->val, o->len);
				break;
			default:
				status = tx_delete(p, o->table, o->key);
				break;
			}
		}
		if (status != 0) {
			fb_err(err, errlen, "apply",
			       status == EEXIST ? "insert of an existing key"
						: "update or delete of a missing key");
			pmemobj_tx_abort(status);
		}
	} TX_ONABORT {
		if (status == 0) {
			status = errno ? errno : EIO;
			fb_err(err, errlen, "transaction aborted", pmemobj_errormsg());
		}
	} TX_END
	return status;
}

/*
 * Calibration only: the transaction of the project's PMDK anchor, with no index. Allocates an
 * array of n slots (outside the timed part), then runs n transactions that each allocate a
 * value of `len` bytes and point slot i at it (the slot is undo-logged). Returns the
 * nanoseconds the n transactions took (CLOCK_MONOTONIC), or -errno.
 */
int64_t fb_pmdk_raw_alloc_slot(fb_pool *p, uint64_t n, uint64_t len)
{
	PMEMoid slots;
	if (pmemobj_zalloc(p->pop, &slots, n * sizeof(PMEMoid), FB_TYPE_NODE + 10) != 0)
		return -(errno ? errno : ENOMEM);
	PMEMoid *sl = (PMEMoid *)pmemobj_direct(slots);
	unsigned char val[4096];
	memset(val, 0x5a, sizeof val);
	if (len > sizeof val)
		len = sizeof val;
	struct timespec t0, t1;
	volatile int status = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t i = 0; i < n && status == 0; i++) {
		TX_BEGIN(p->pop) {
			PMEMoid v = new_value(val, len);
			pmemobj_tx_add_range(slots, i * sizeof(PMEMoid), sizeof(PMEMoid));
			sl[i] = v;
		} TX_ONABORT {
			status = errno ? errno : EIO;
		} TX_END
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (status != 0)
		return -(int64_t)status;
	return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}

/*
 * Allocator benchmark (compared with Ferrite's PAllocator, seed 001 §3.5): PMDK's own
 * leak-free interface. pmemobj_alloc(pop, &slot, size, ...) reserves a block, writes its oid
 * into `slot` and persists both atomically; pmemobj_free(&slot) frees it and durably nulls the
 * slot. The slots are an array in the pool, allocated (zeroed) here, outside any timing.
 * Returns 0 or an errno.
 */
int fb_pmdk_bench_slots(fb_pool *p, uint64_t n)
{
	if (!OID_IS_NULL(p->bench))
		pmemobj_free(&p->bench);
	p->bench_n = 0;
	if (pmemobj_zalloc(p->pop, &p->bench, n * sizeof(PMEMoid), FB_TYPE_VALUE + 20) != 0)
		return errno ? errno : ENOMEM;
	p->bench_n = n;
	return 0;
}

/* With `sizes`: pmemobj_alloc of sizes[i] into null slot i; without: pmemobj_free of non-null
 * slot i; for i < n. Returns the nanoseconds taken (CLOCK_MONOTONIC), or -errno. */
static int64_t bench_phase(fb_pool *p, const uint64_t *sizes, uint64_t n)
{
	if (n > p->bench_n)
		return -EINVAL;
	PMEMoid *sl = (PMEMoid *)pmemobj_direct(p->bench);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t i = 0; i < n; i++) {
		if (sizes == NULL) {
			if (OID_IS_NULL(sl[i]))
				return -EINVAL;
			pmemobj_free(&sl[i]);
		} else if (pmemobj_alloc(p->pop, &sl[i], sizes[i], FB_TYPE_VALUE + 21, NULL, NULL) != 0) {
			return -(int64_t)(errno ? errno : ENOMEM);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}

/* pmemobj_alloc of sizes[i] into slot i for i < n (every slot null). */
int64_t fb_pmdk_bench_alloc(fb_pool *p, const uint64_t *sizes, uint64_t n)
{
	return bench_phase(p, sizes, n);
}

/* pmemobj_free of slots 0..n (each non-null). */
int64_t fb_pmdk_bench_free(fb_pool *p, uint64_t n)
{
	return bench_phase(p, NULL, n);
}

/*
 * The allocator benchmark's concurrent entry points: one slot per call, no lock in the shim.
 * pmemobj_alloc and pmemobj_free are thread-safe in libpmemobj (each thread works in its own
 * lane), and these functions read only fields of `p` that are set before any of them can run
 * (pop, bench, bench_n); the caller guarantees that no two calls work on the same slot at the
 * same time (the Rust wrapper claims the slot first). Each returns 0 or an errno: EINVAL for a
 * slot out of range, a non-null slot to allocate into or a null slot to free.
 */
int fb_pmdk_bench_alloc_one(fb_pool *p, uint64_t i, uint64_t size)
{
	if (i >= p->bench_n || size == 0)
		return EINVAL;
	PMEMoid *sl = (PMEMoid *)pmemobj_direct(p->bench);
	if (!OID_IS_NULL(sl[i]))
		return EINVAL;
	if (pmemobj_alloc(p->pop, &sl[i], size, FB_TYPE_VALUE + 21, NULL, NULL) != 0)
		return errno ? errno : ENOMEM;
	return 0;
}

int fb_pmdk_bench_free_one(fb_pool *p, uint64_t i)
{
	if (i >= p->bench_n)
		return EINVAL;
	PMEMoid *sl = (PMEMoid *)pmemobj_direct(p->bench);
	if (OID_IS_NULL(sl[i]))
		return EINVAL;
	pmemobj_free(&sl[i]);
	return 0;
}
