/* vmscope_labels.h: tell vmscope what a program's threads are doing (labels) and what happens
 * to the objects of its domain (domain events), from C or any runtime that can call C.
 *
 * Labels are read by vmscope's sampler with every sample of a thread, from the thread's own
 * memory: setting them is one store of an id (vmscope_use_labels), with no message and no
 * system call, so that a program may change them a million times a second. The label sets
 * themselves are published once each, through the code map file of codemap.proto
 * (vmscope-PID.codemap, mapped executable so that the daemon finds it), before any thread
 * uses them.
 *
 * Usage (proto/CODE-MAPS.md, "Labels" and "Domain events", says what the daemon checks):
 *
 *     #include "vmscope_labels.h"          // in one C file: its functions are static
 *     vmscope_labels_open("myvm 1.0");    // once, in the process
 *     const char *k[] = {"phase"}, *a[] = {"parse"};
 *     uint64_t parsing = vmscope_label_set(k, a, 1);   // once per distinct set
 *     vmscope_thread_labels_start();      // in each thread that sets labels
 *     vmscope_use_labels(parsing);        // ... its samples are labelled phase=parse
 *     vmscope_use_labels(0);              // ... and now unlabelled
 *     vmscope_thread_labels_stop();       // before the thread exits
 *     vmscope_domain_event("refresh", node_id, NULL, 0);
 *
 * Bounds (the daemon refuses beyond them, counted, never the rest): at most
 * VMSCOPE_MAX_LABELS labels per set, keys of 1 to 64 bytes, values of 1 to 128 bytes, 4,096
 * sets per process, 1,024 threads with labels.
 *
 * The file goes to $VMSCOPE_CODEMAP_DIR, else /tmp. Functions return 0 (or a set id) on
 * success and -1 (or 0) on failure, with errno set; a program may ignore them: a profile then
 * lacks the labels, and nothing else changes.
 */
#ifndef VMSCOPE_LABELS_H
#define VMSCOPE_LABELS_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define VMSCOPE_MAX_LABELS 8
#define VMSCOPE_MAX_KEY 64
#define VMSCOPE_MAX_VALUE 128

/* The process's code map file, and the next set id. */
static int vmscope_fd = -1;
static uint64_t vmscope_next_set = 1;
static pthread_mutex_t vmscope_lock = PTHREAD_MUTEX_INITIALIZER;

/* The id of the calling thread's current label set: the word the sampler reads. */
static __thread uint64_t vmscope_thread_word;

/* A record being encoded: protobuf's wire format, by hand (varints and length-delimited
 * fields are all these messages use). */
struct vmscope_buf {
    uint8_t bytes[4096];
    size_t len;
    int overflow;
};

static void vmscope_put(struct vmscope_buf *b, const void *p, size_t n) {
    if (b->len + n > sizeof b->bytes) {
        b->overflow = 1;
        return;
    }
    memcpy(b->bytes + b->len, p, n);
    b->len += n;
}

static void vmscope_varint(struct vmscope_buf *b, uint64_t v) {
    uint8_t out[10];
    size_t n = 0;
    do {
        out[n] = v & 0x7f;
        v >>= 7;
        if (v)
            out[n] |= 0x80;
        n++;
    } while (v);
    vmscope_put(b, out, n);
}

/* Field `field` of wire type 0 (varint). */
static void vmscope_uint(struct vmscope_buf *b, unsigned field, uint64_t v) {
    vmscope_varint(b, (uint64_t)field << 3);
    vmscope_varint(b, v);
}

/* Field `field` of wire type 2 (bytes), from `n` bytes at `p`. */
static void vmscope_bytes(struct vmscope_buf *b, unsigned field, const void *p, size_t n) {
    vmscope_varint(b, ((uint64_t)field << 3) | 2);
    vmscope_varint(b, n);
    vmscope_put(b, p, n);
}

static uint64_t vmscope_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Appends one CodeMapEvent whose event is field `field` holding `body`: its length as a
 * varint, then the message, in one write so that a reader sees it whole or not yet. */
static int vmscope_append(unsigned field, const struct vmscope_buf *body) {
    struct vmscope_buf event = {.len = 0}, record = {.len = 0};
    if (body->overflow) {
        errno = E2BIG;
        return -1;
    }
    vmscope_uint(&event, 1, vmscope_now_ns());
    vmscope_bytes(&event, field, body->bytes, body->len);
    vmscope_varint(&record, event.len);
    vmscope_put(&record, event.bytes, event.len);
    if (event.overflow || record.overflow) {
        errno = E2BIG;
        return -1;
    }
    if (vmscope_fd < 0) {
        errno = EBADF;
        return -1;
    }
    ssize_t written = write(vmscope_fd, record.bytes, record.len);
    return written == (ssize_t)record.len ? 0 : -1;
}

/* Opens the process's code map file and says who publishes (Hello). */
static int vmscope_labels_open(const char *vm_name) {
    const char *dir = getenv("VMSCOPE_CODEMAP_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/vmscope-%d.codemap", dir && *dir ? dir : "/tmp", getpid());
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    static const char header[16] = "VMSCOPE-CODEMAP\x01";
    if (write(fd, header, sizeof header) != sizeof header) {
        close(fd);
        return -1;
    }
    /* Mapped executable, as jitdump files are: how the daemon finds it in /proc/PID/maps. */
    int readable = open(path, O_RDONLY | O_CLOEXEC);
    if (readable < 0 ||
        mmap(NULL, sizeof header, PROT_READ | PROT_EXEC, MAP_PRIVATE, readable, 0) == MAP_FAILED) {
        if (readable >= 0)
            close(readable);
        close(fd);
        return -1;
    }
    close(readable);
    vmscope_fd = fd;
    struct vmscope_buf hello = {.len = 0};
    vmscope_uint(&hello, 1, (uint64_t)getpid());
    vmscope_bytes(&hello, 2, vm_name, strlen(vm_name));
    return vmscope_append(2, &hello);
}

/* Publishes the set of `n` labels keys[i] = values[i]; returns its id for
 * vmscope_use_labels, or 0 on failure. Publish each distinct set once. */
static uint64_t vmscope_label_set(const char *const *keys, const char *const *values, int n) {
    if (n < 0 || n > VMSCOPE_MAX_LABELS) {
        errno = EINVAL;
        return 0;
    }
    pthread_mutex_lock(&vmscope_lock);
    uint64_t id = vmscope_next_set++;
    struct vmscope_buf set = {.len = 0};
    vmscope_uint(&set, 1, id);
    for (int i = 0; i < n; i++) {
        struct vmscope_buf label = {.len = 0};
        vmscope_bytes(&label, 1, keys[i], strlen(keys[i]));
        vmscope_bytes(&label, 2, values[i], strlen(values[i]));
        vmscope_bytes(&set, 2, label.bytes, label.len);
    }
    int failed = vmscope_append(17, &set);
    pthread_mutex_unlock(&vmscope_lock);
    return failed ? 0 : id;
}

/* Where a thread's label word is (ThreadLabels), or 0 for no longer. */
static int vmscope_thread_word_at(uint64_t address) {
    struct vmscope_buf thread = {.len = 0};
    vmscope_uint(&thread, 1, (uint64_t)syscall(SYS_gettid));
    vmscope_uint(&thread, 2, address);
    pthread_mutex_lock(&vmscope_lock);
    int failed = vmscope_append(16, &thread);
    pthread_mutex_unlock(&vmscope_lock);
    return failed;
}

/* Has the calling thread's samples read its labels: call it as the thread starts. */
static int vmscope_thread_labels_start(void) {
    vmscope_thread_word = 0;
    return vmscope_thread_word_at((uint64_t)(uintptr_t)&vmscope_thread_word);
}

/* Reads the calling thread's labels no more: call it before the thread exits. */
static int vmscope_thread_labels_stop(void) {
    return vmscope_thread_word_at(0);
}

/* The calling thread's labels from now on: a set vmscope_label_set returned, or 0 for none.
 * A plain store: the sampler reads the word when it interrupts the thread. */
static inline void vmscope_use_labels(uint64_t set) {
    __atomic_store_n(&vmscope_thread_word, set, __ATOMIC_RELAXED);
}

/* The calling thread's labels now. */
static inline uint64_t vmscope_current_labels(void) {
    return __atomic_load_n(&vmscope_thread_word, __ATOMIC_RELAXED);
}

/* Publishes an event of the program's domain: what happened (`type`), to which object (an id
 * that stays the object's for its life; 0 for none), and optionally what emitted it (`n`
 * frame names, innermost first). */
static int vmscope_domain_event(const char *type, uint64_t object, const char *const *frames,
                                int n) {
    struct vmscope_buf event = {.len = 0};
    vmscope_bytes(&event, 1, type, strlen(type));
    if (object)
        vmscope_uint(&event, 2, object);
    vmscope_uint(&event, 3, (uint64_t)syscall(SYS_gettid));
    for (int i = 0; i < n; i++)
        vmscope_bytes(&event, 4, frames[i], strlen(frames[i]));
    pthread_mutex_lock(&vmscope_lock);
    int failed = vmscope_append(18, &event);
    pthread_mutex_unlock(&vmscope_lock);
    return failed;
}

#endif
