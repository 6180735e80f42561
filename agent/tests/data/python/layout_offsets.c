/*
 * Prints the CPython struct offsets that kiln-agent's python::layout module
 * hard-codes, so its tests can check the built-in tables against the real
 * headers.  Compile once per interpreter version, for x86-64, against that
 * version's headers (internal ones included):
 *
 *   cc -I $PREFIX/include/python3.X -o layout_offsets layout_offsets.c
 *
 * (Debian's libpython3.X-dev also needs -I /usr/include for its
 * per-architecture pyconfig.h.)  The agent's tests do this for every version
 * whose headers they find (pyenv, or KILN_PYTHON3<minor>_INCLUDE).
 *
 * Output: one `name=value` line per Layout field, in decimal; `none` where
 * the version has no such field.  Bit positions of the unicode state word
 * are found by setting each bitfield in a zeroed object, since offsetof
 * cannot name a bitfield.
 */
/* The internal headers refuse to be included without it. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030A0000 || PY_VERSION_HEX >= 0x030F0000
#error "layout_offsets.c covers CPython 3.10 to 3.14"
#endif
#ifdef Py_GIL_DISABLED
#error "the layouts are those of the default (GIL) build"
#endif

#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_stackref.h"
#include "internal/pycore_code.h"
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include "frameobject.h"
#endif

static void put(const char *name, unsigned long long v) { printf("%s=%llu\n", name, v); }
static void none(const char *name) { printf("%s=none\n", name); }

/* The lowest set bit of the 32-bit state word of `o`. */
static unsigned state_bit(const PyASCIIObject *o) {
    uint32_t w;
    memcpy(&w, (const char *)o + offsetof(PyASCIIObject, state), sizeof w);
    return (unsigned)__builtin_ctz(w);
}

int main(void) {
    printf("version=%d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
    put("runtime_interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX >= 0x030B0000
    put("interp_threads_head", offsetof(PyInterpreterState, threads.head));
#else
    put("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
#endif
    put("tstate_next", offsetof(PyThreadState, next));
    put("tstate_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
    put("tstate_native_thread_id", offsetof(PyThreadState, native_thread_id));
#else
    none("tstate_native_thread_id");
#endif

#if PY_VERSION_HEX >= 0x030D0000
    put("tstate_frame", offsetof(PyThreadState, current_frame));
    none("cframe_current_frame");
#elif PY_VERSION_HEX >= 0x030B0000
    put("tstate_frame", offsetof(PyThreadState, cframe));
    put("cframe_current_frame", offsetof(_PyCFrame, current_frame));
#else
    put("tstate_frame", offsetof(PyThreadState, frame));
    none("cframe_current_frame");
#endif

#if PY_VERSION_HEX >= 0x030E0000
    put("frame_previous", offsetof(_PyInterpreterFrame, previous));
    put("frame_code", offsetof(_PyInterpreterFrame, f_executable));
    put("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
    none("frame_is_entry");
    put("frame_owner", offsetof(_PyInterpreterFrame, owner));
    /* 3.14 marks the frame _PyEval_EvalFrameDefault pushes on entry (the
       C-stack boundary) FRAME_OWNED_BY_INTERPRETER; FRAME_OWNED_BY_CSTACK
       moved to 4 and no 3.14 code assigns it. */
    put("owner_cstack", FRAME_OWNED_BY_INTERPRETER);
#elif PY_VERSION_HEX >= 0x030D0000
    put("frame_previous", offsetof(_PyInterpreterFrame, previous));
    put("frame_code", offsetof(_PyInterpreterFrame, f_executable));
    put("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
    none("frame_is_entry");
    put("frame_owner", offsetof(_PyInterpreterFrame, owner));
    put("owner_cstack", FRAME_OWNED_BY_CSTACK);
#elif PY_VERSION_HEX >= 0x030C0000
    put("frame_previous", offsetof(_PyInterpreterFrame, previous));
    put("frame_code", offsetof(_PyInterpreterFrame, f_code));
    put("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
    none("frame_is_entry");
    put("frame_owner", offsetof(_PyInterpreterFrame, owner));
    put("owner_cstack", FRAME_OWNED_BY_CSTACK);
#elif PY_VERSION_HEX >= 0x030B0000
    put("frame_previous", offsetof(_PyInterpreterFrame, previous));
    put("frame_code", offsetof(_PyInterpreterFrame, f_code));
    put("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
    put("frame_is_entry", offsetof(_PyInterpreterFrame, is_entry));
    /* 3.11 has an owner byte too, but no C-stack owner: entry frames are
       marked by is_entry, so the layout leaves owner out. */
    none("frame_owner");
    put("owner_cstack", 0);
#else
    put("frame_previous", offsetof(PyFrameObject, f_back));
    put("frame_code", offsetof(PyFrameObject, f_code));
    put("frame_instr", offsetof(PyFrameObject, f_lasti));
    none("frame_is_entry");
    none("frame_owner");
    put("owner_cstack", 0);
#endif
#if PY_VERSION_HEX >= 0x030E0000
    /* f_executable is a _PyStackRef: its low bits are tags. */
    put("code_tag_mask", ~(unsigned long long)Py_TAG_BITS);
#else
    /* Untagged object pointers before 3.14. */
    put("code_tag_mask", ~0ULL);
#endif

    put("code_filename", offsetof(PyCodeObject, co_filename));
    put("code_name", offsetof(PyCodeObject, co_name));
#if PY_VERSION_HEX >= 0x030B0000
    put("code_qualname", offsetof(PyCodeObject, co_qualname));
#else
    none("code_qualname");
#endif
    put("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    put("code_linetable", offsetof(PyCodeObject, co_linetable));
#if PY_VERSION_HEX >= 0x030B0000
    put("code_bytecode", offsetof(PyCodeObject, co_code_adaptive));
#else
    put("code_bytecode", offsetof(PyCodeObject, co_code));
#endif

    put("unicode_state", offsetof(PyASCIIObject, state));
    put("unicode_ascii_data", sizeof(PyASCIIObject));
    put("unicode_compact_data", sizeof(PyCompactUnicodeObject));
    put("unicode_length", offsetof(PyASCIIObject, length));
    put("bytes_size", offsetof(PyBytesObject, ob_base.ob_size));
    put("bytes_data", offsetof(PyBytesObject, ob_sval));

    PyASCIIObject o;
    memset(&o, 0, sizeof o);
    o.state.kind = 1;
    put("unicode_kind_shift", state_bit(&o));
    memset(&o, 0, sizeof o);
    o.state.compact = 1;
    put("unicode_compact_bit", state_bit(&o));
    memset(&o, 0, sizeof o);
    o.state.ascii = 1;
    put("unicode_ascii_bit", state_bit(&o));
    return 0;
}
