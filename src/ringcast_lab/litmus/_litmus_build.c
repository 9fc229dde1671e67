/* _litmus_build.c: the build, described (build_info's probes and names), part of the ringcast_lab._litmus
 * extension: included by _litmus.c (one translation unit: the fence points, shapes and helpers
 * above it in that file are shared). */

static __attribute__((noinline)) void
probe_fence(void)
{
    rc_fence();
}

static __attribute__((noinline)) uint32_t
probe_f6n(uint32_t *p)
{
    return rc_fence_load_u32(p);
}

static __attribute__((noinline)) uint32_t
probe_f6w(uint32_t *p)
{
    return rc_fetch_add_u32(p, 1);
}

/* The ordering instructions in a function's first bytes, read from its machine code. */
static void
describe_code(const void *fn, char *out, size_t cap)
{
    const unsigned char *c = fn;
    size_t len = 0;
    out[0] = '\0';
#define ADD(s) \
    do { len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", len ? "; " : "", (s)); } while (0)
#if defined(__x86_64__) || defined(__i386__)
    for (int i = 0; i < 48; i++) {
        if (c[i] == 0x0f && c[i + 1] == 0xae && c[i + 2] == 0xf0)
            ADD("mfence");
        else if (c[i] == 0xf0 && c[i + 1] == 0x48 && c[i + 2] == 0x83 && c[i + 3] == 0x0c && c[i + 4] == 0x24)
            ADD("lock orq $0,(%rsp)");
        else if (c[i] == 0xf0 && c[i + 1] == 0x83 && c[i + 2] == 0x0c && c[i + 3] == 0x24)
            ADD("lock orl $0,(%esp)");
        else if (c[i] == 0xf0 && c[i + 1] == 0x0f && c[i + 2] == 0xc1)
            ADD("lock xadd");
        else if (c[i] == 0xc3)
            break;
    }
#elif defined(__aarch64__)
    const uint32_t *w = fn;
    for (int i = 0; i < 24; i++) {
        uint32_t x = w[i];
        if (x == 0xd5033bbf)
            ADD("dmb ish");
        else if (x == 0xd5033fbf)
            ADD("dmb sy");
        else if (x == 0xd50339bf)
            ADD("dmb ishld");
        else if ((x & 0xfffffc00) == 0x88dffc00)
            ADD("ldar");
        else if ((x & 0xfffffc00) == 0x885ffc00)
            ADD("ldaxr");
        else if ((x & 0xffe0fc00) == 0x8800fc00)
            ADD("stlxr");
        else if ((x & 0xffe0fc00) == 0xb8e00000)
            ADD("ldaddal");
        else if ((x & 0xfc000000) == 0x94000000)
            ADD("bl (outline atomic)");
        else if (x == 0xd65f03c0)
            break;
    }
#else
    ADD("(not decoded on this architecture)");
#endif
    if (len == 0)
        ADD("no fence or locked instruction");
#undef ADD
}

static const char *
arch_name(void)
{
#if defined(__x86_64__)
    return "x86_64";
#elif defined(__aarch64__)
#if defined(__ARM_FEATURE_ATOMICS)
    return "aarch64 (LSE atomics inline)";
#else
    return "aarch64";
#endif
#elif defined(__powerpc64__)
    return "ppc64";
#else
    return "other";
#endif
}

static const char *
compiler_name(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}
