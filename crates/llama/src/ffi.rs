//! The only `unsafe` in wick: raw per-sequence KV state bytes, which `llama-cpp-2` exposes only
//! as unsafe functions (its safe `SeqState` is opaque and cannot be written to disk), and the
//! switch to ggml's batch-invariant CPU kernels (with wick's own flash attention in them), which
//! llama.cpp does not expose at all, llama.cpp's RPC backend, whose functions ggml hands out
//! only as untyped pointers. wick's kernels themselves live in `wick-kernels` (their CPU
//! instructions in its one intrinsics module); this module only hooks them into ggml's graph.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::OnceLock;

use llama_cpp_sys_2 as sys;

use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;

/// The KV state of sequence `seq` as bytes.
pub(crate) fn seq_state_bytes(ctx: &LlamaContext<'_>, seq: i32) -> Option<Vec<u8>> {
    let flags = LlamaStateSeqFlags::empty();
    let size = ctx.state_seq_get_size_ext(seq, flags);
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds exactly `size` bytes, the size llama.cpp reported for this
    // sequence's state; the context is exclusively ours (one thread owns it), so the state cannot
    // grow between the two calls, and llama.cpp writes at most that many bytes.
    let written = unsafe { ctx.state_seq_get_data_ext(bytes.as_mut_ptr(), seq, flags) };
    (written == size).then_some(bytes)
}

/// The recurrent part of sequence `seq`'s state as bytes (llama.cpp's partial state: a
/// recurrent model's per-sequence state, without a hybrid's attention cells).
pub(crate) fn seq_partial_state_bytes(ctx: &LlamaContext<'_>, seq: i32) -> Option<Vec<u8>> {
    let flags = LlamaStateSeqFlags::PARTIAL_ONLY;
    let size = ctx.state_seq_get_size_ext(seq, flags);
    let mut bytes = vec![0u8; size];
    // SAFETY: as in `seq_state_bytes`: `bytes` holds exactly the `size` bytes llama.cpp
    // reported for this sequence's partial state, which cannot change between the two calls.
    let written = unsafe { ctx.state_seq_get_data_ext(bytes.as_mut_ptr(), seq, flags) };
    (written == size).then_some(bytes)
}

/// Replaces the recurrent part of sequence `seq`'s state with bytes made by
/// [`seq_partial_state_bytes`] for the same context; a hybrid's attention cells stay.
pub(crate) fn set_seq_partial_state_bytes(
    ctx: &mut LlamaContext<'_>,
    seq: i32,
    bytes: &[u8],
) -> bool {
    // SAFETY: llama.cpp reads at most `bytes.len()` bytes, bounds-checking each read; the bytes
    // came from `llama_state_seq_get_data_ext` with the same flag on this very context (the
    // worker keeps them in memory only), the precondition of `llama_state_seq_set_data_ext`.
    unsafe { ctx.state_seq_set_data_ext(bytes, seq, LlamaStateSeqFlags::PARTIAL_ONLY) }
}

/// Restores sequence `seq` from bytes made by [`seq_state_bytes`].
///
/// Callers only pass bytes that came out of [`seq_state_bytes`] for the same model and context
/// layout: the snapshot envelope (`wick_backend::snapshot`) checks an XXH3-128 checksum and the layout
/// fingerprint before the bytes get here.
pub(crate) fn set_seq_state_bytes(ctx: &mut LlamaContext<'_>, seq: i32, bytes: &[u8]) -> bool {
    // SAFETY: llama.cpp reads at most `bytes.len()` bytes (it is passed the length and bounds-
    // checks every read), and the bytes were produced by `llama_state_seq_get_data_ext` for a
    // context of the same model and layout (checked by the caller's envelope), which is the
    // precondition of `llama_state_seq_set_data_ext`.
    unsafe { ctx.state_seq_set_data_ext(bytes, seq, LlamaStateSeqFlags::empty()) }
}

/// The head of ggml's `struct ggml_backend_device_i` (`ggml/src/ggml-backend-impl.h` in the
/// llama.cpp that llama-cpp-sys-2 0.1.161 vendors, pinned in the workspace): the function
/// pointers up to `init_backend`, in their declared order. A `ggml_backend_device` starts
/// with this table, by value.
#[repr(C)]
struct DeviceIfaceHead {
    get_name: Option<unsafe extern "C" fn(sys::ggml_backend_dev_t) -> *const std::ffi::c_char>,
    get_description:
        Option<unsafe extern "C" fn(sys::ggml_backend_dev_t) -> *const std::ffi::c_char>,
    get_memory: Option<unsafe extern "C" fn(sys::ggml_backend_dev_t, *mut usize, *mut usize)>,
    get_type: Option<unsafe extern "C" fn(sys::ggml_backend_dev_t) -> sys::ggml_backend_dev_type>,
    get_props: Option<unsafe extern "C" fn(sys::ggml_backend_dev_t, *mut std::ffi::c_void)>,
    init_backend: Option<InitBackend>,
}

type InitBackend =
    unsafe extern "C" fn(sys::ggml_backend_dev_t, *const std::ffi::c_char) -> sys::ggml_backend_t;

/// The CPU device's own `init_backend`, saved before [`install_kernel_switch`] replaces it.
static ORIGINAL_INIT: OnceLock<InitBackend> = OnceLock::new();

/// Whether the hook is in place (decided once per process).
static INSTALLED: OnceLock<bool> = OnceLock::new();

thread_local! {
    /// Whether CPU backends created on this thread use ggml's reference kernels.
    static USE_REF: Cell<bool> = const { Cell::new(false) };
}

/// Runs `create` (which creates a llama.cpp context on this thread) so that the CPU backend
/// the context creates uses ggml's reference kernels when `use_ref` is true (and the switch is
/// available: [`kernel_switch_available`]).
///
/// llama.cpp creates its CPU backend inside `llama_init_from_model` and never hands it out, so
/// ggml's `ggml_backend_cpu_set_use_ref` cannot be called on it afterwards. Instead, wick
/// installs (once per process) a hook in the CPU device's `init_backend`: it calls the
/// original and then switches the new backend to reference kernels when the creating thread
/// asked for them. When the hook cannot be installed (a ggml whose device table does not look
/// as expected), nothing is changed and `create` runs with the default kernels.
pub(crate) fn with_cpu_kernels<R>(use_ref: bool, create: impl FnOnce() -> R) -> R {
    with_flag(&USE_REF, use_ref && install_kernel_switch(), create)
}

/// Runs `f` with this thread's `flag` set to `on`, then puts it back.
fn with_flag<R>(
    flag: &'static std::thread::LocalKey<Cell<bool>>,
    on: bool,
    f: impl FnOnce() -> R,
) -> R {
    let previous = flag.with(|flag| flag.replace(on));
    let result = f();
    flag.with(|flag| flag.set(previous));
    result
}

/// The head of ggml's `struct ggml_backend_reg` (`ggml/src/ggml-backend-impl.h` of the pinned
/// llama.cpp): its API version, then its `ggml_backend_reg_i` table by value.
#[repr(C)]
struct RegHead {
    api_version: std::ffi::c_int,
    get_name: Option<unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *const std::ffi::c_char>,
    get_device_count: Option<unsafe extern "C" fn(sys::ggml_backend_reg_t) -> usize>,
    get_device:
        Option<unsafe extern "C" fn(sys::ggml_backend_reg_t, usize) -> sys::ggml_backend_dev_t>,
    get_proc_address: Option<GetProcAddress>,
}

type GetProcAddress =
    unsafe extern "C" fn(sys::ggml_backend_reg_t, *const std::ffi::c_char) -> *mut std::ffi::c_void;

/// The CPU registry's own `get_proc_address`, saved before [`install_plain_weights`]
/// replaces it.
static ORIGINAL_PROC: OnceLock<GetProcAddress> = OnceLock::new();

/// Whether the plain-weights hook is in place (decided once per process).
static PLAIN_INSTALLED: OnceLock<bool> = OnceLock::new();

thread_local! {
    /// Whether models loaded on this thread keep every weight in ggml's plain layout.
    static PLAIN_WEIGHTS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `load` (which loads a llama.cpp model on this thread) so that, when `plain`, no weight
/// goes to the CPU's extra buffer types (`CPU_REPACK`: `Q4_0`, `Q4_K`, `IQ4_NL`, … interleaved for
/// tiled GEMM kernels whose sums depend on the batch), and otherwise none to ggml's `AMX` one.
///
/// ggml's AMX kernels (Sapphire Rapids and later, for `Q4_0`, `Q4_1`, `Q8_0` and some K-quants)
/// crashed on the first machine with AMX wick ran on — an illegal instruction on `tileloadd`
/// with one thread, a segmentation fault with two, in `ggml_backend_amx_mul_mat`, and
/// `llama-bench` itself the same — so wick's fast mode leaves them out (the repacked and
/// llamafile kernels still run) and `wick bench` builds `llama-bench` without them.
///
/// llama.cpp asks the CPU registry for those buffer types (`ggml_backend_dev_get_extra_bufts`
/// through `get_proc_address`) while it loads a model, and even a tensor-override to the CPU
/// buffer type lets them in; llama-cpp-2 does not expose `use_extra_bufts`. So wick installs
/// (once per process) a hook in the CPU registry's `get_proc_address` that answers null for
/// that one name while a thread that asked for plain weights loads a model.
pub(crate) fn with_plain_weights<R>(plain: bool, load: impl FnOnce() -> R) -> R {
    let installed = install_plain_weights();
    with_flag(&PLAIN_WEIGHTS, plain && installed, load)
}

type ExtraBufts =
    unsafe extern "C" fn(sys::ggml_backend_dev_t) -> *mut sys::ggml_backend_buffer_type_t;

/// The CPU device's own `ggml_backend_dev_get_extra_bufts`, saved by the hook.
static ORIGINAL_EXTRA: OnceLock<ExtraBufts> = OnceLock::new();

/// [`ORIGINAL_EXTRA`]'s list without ggml's `AMX` buffer type, null-terminated (the buffer
/// types' addresses: statics of ggml's that live for the process).
static WITHOUT_AMX: OnceLock<Vec<usize>> = OnceLock::new();

/// Whether `buft` is ggml's `AMX` buffer type.
///
/// # Safety
///
/// `buft` is a live ggml buffer type.
unsafe fn is_amx(buft: sys::ggml_backend_buffer_type_t) -> bool {
    // SAFETY: the caller's contract; ggml names each buffer type with a static C string.
    unsafe {
        let name = sys::ggml_backend_buft_name(buft);
        !name.is_null() && std::ffi::CStr::from_ptr(name) == c"AMX"
    }
}

/// The CPU device's extra buffer types but `AMX` (see [`with_plain_weights`]).
unsafe extern "C" fn extra_bufts_without_amx(
    dev: sys::ggml_backend_dev_t,
) -> *mut sys::ggml_backend_buffer_type_t {
    let list = WITHOUT_AMX.get_or_init(|| {
        let original = ORIGINAL_EXTRA
            .get()
            .expect("saved before this is handed out");
        let mut kept = Vec::new();
        // SAFETY: ggml's function returns its static, null-terminated array of buffer types
        // (or null); each is a static buffer type whose name ggml gives as a C string.
        unsafe {
            let mut at = original(dev);
            while !at.is_null() && !(*at).is_null() {
                if !is_amx(*at) {
                    kept.push(*at as usize);
                }
                at = at.add(1);
            }
        }
        kept.push(0);
        kept
    });
    list.as_ptr().cast_mut().cast()
}

unsafe extern "C" fn get_proc_address_hook(
    reg: sys::ggml_backend_reg_t,
    name: *const std::ffi::c_char,
) -> *mut std::ffi::c_void {
    // SAFETY: ggml passes a NUL-terminated name (checked for null); the original is saved
    // before this hook is installed and is called with the arguments ggml gave. The extra
    // buffer types' getter it answers is a C function of `ExtraBufts`'s signature (ggml's
    // `ggml_backend_dev_get_extra_bufts_t`), so the transmute of its address is sound.
    unsafe {
        let original = ORIGINAL_PROC
            .get()
            .expect("saved before the hook is installed");
        if !name.is_null() && std::ffi::CStr::from_ptr(name) == c"ggml_backend_dev_get_extra_bufts"
        {
            if PLAIN_WEIGHTS.with(Cell::get) {
                return std::ptr::null_mut();
            }
            let extra = original(reg, name);
            if extra.is_null() {
                return extra;
            }
            // The function ggml answers with has `ExtraBufts`'s signature (ggml-cpu.cpp's
            // `ggml_backend_cpu_device_get_extra_buffers_type`).
            let _ = ORIGINAL_EXTRA.set(std::mem::transmute::<*mut std::ffi::c_void, ExtraBufts>(
                extra,
            ));
            return extra_bufts_without_amx as *mut std::ffi::c_void;
        }
        original(reg, name)
    }
}

/// Replaces the CPU registry's `get_proc_address` with [`get_proc_address_hook`], once per
/// process, after checking that the registry is laid out as [`RegHead`] says. Returns whether
/// the hook is in place.
fn install_plain_weights() -> bool {
    *PLAIN_INSTALLED.get_or_init(|| {
        // SAFETY: ggml's static CPU device and its static registry (or null, checked).
        let reg = unsafe {
            let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
            if dev.is_null() {
                return false;
            }
            sys::ggml_backend_dev_backend_reg(dev)
        };
        if reg.is_null() {
            return false;
        }
        // SAFETY: a `ggml_backend_reg` is an `int` then its `ggml_backend_reg_i` table by value
        // (four function pointers, the last `get_proc_address`). Before trusting that layout,
        // it is checked against ggml's public accessors, which read the same table: `get_name`
        // must return `ggml_backend_reg_name`'s pointer, `get_device_count` the count
        // `ggml_backend_reg_dev_count` gives, and `get_proc_address` must answer the CPU's
        // own function name as `ggml_backend_reg_get_proc_address` does. The registry is a
        // static of ggml's that lives for the process; the write happens once (`OnceLock`),
        // before the first model loads with plain weights.
        unsafe {
            let head = &mut *reg.cast::<RegHead>();
            let (Some(get_name), Some(count), Some(proc_address)) =
                (head.get_name, head.get_device_count, head.get_proc_address)
            else {
                return false;
            };
            let probe = c"ggml_backend_dev_get_extra_bufts";
            let matches = get_name(reg) == sys::ggml_backend_reg_name(reg)
                && count(reg) == sys::ggml_backend_reg_dev_count(reg)
                && proc_address(reg, probe.as_ptr())
                    == sys::ggml_backend_reg_get_proc_address(reg, probe.as_ptr());
            if !matches {
                tracing::warn!(
                    "ggml's CPU registry is not laid out as expected: repacked weights stay                      (not batch-invariant)"
                );
                return false;
            }
            let _ = ORIGINAL_PROC.set(proc_address);
            head.get_proc_address = Some(get_proc_address_hook);
            true
        }
    })
}

/// Whether the reference-kernel switch and the plain-weights switch are (or can be) in place
/// in this process: what the deterministic mode needs.
pub(crate) fn kernel_switch_available() -> bool {
    install_kernel_switch() && install_plain_weights()
}

/// The kernel format of a ggml weight type, for the types wick's matrix kernel reads.
pub(crate) fn kernel_format(t: sys::ggml_type) -> Option<wick_kernels::matmul::Format> {
    use wick_kernels::matmul::Format;
    Some(match t {
        sys::GGML_TYPE_Q4_0 => Format::Q4_0,
        sys::GGML_TYPE_Q4_1 => Format::Q4_1,
        sys::GGML_TYPE_Q5_0 => Format::Q5_0,
        sys::GGML_TYPE_Q5_1 => Format::Q5_1,
        sys::GGML_TYPE_Q8_0 => Format::Q8_0,
        sys::GGML_TYPE_Q4_K => Format::Q4_K,
        sys::GGML_TYPE_Q5_K => Format::Q5_K,
        sys::GGML_TYPE_IQ4_NL => Format::IQ4_NL,
        sys::GGML_TYPE_IQ4_XS => Format::IQ4_XS,
        sys::GGML_TYPE_Q6_K => Format::Q6_K,
        sys::GGML_TYPE_Q3_K => Format::Q3_K,
        sys::GGML_TYPE_Q2_K => Format::Q2_K,
        sys::GGML_TYPE_F16 => Format::F16,
        sys::GGML_TYPE_BF16 => Format::BF16,
        sys::GGML_TYPE_F32 => Format::F32,
        sys::GGML_TYPE_MXFP4 => Format::MXFP4,
        _ => return None,
    })
}

/// The ggml types of the tensors of the GGUF model at `path`, as ggml's own reader sees them
/// (the headers only: no weight is read). A model split across files is read part by part,
/// its parts named as llama.cpp's loader names them from the first (`…-00001-of-00003.gguf`).
/// `None` when a header cannot be read.
pub(crate) fn gguf_tensor_types(path: &std::path::Path) -> Option<Vec<sys::ggml_type>> {
    let first = std::ffi::CString::new(path.to_str()?).ok()?;
    let (mut types, count) = header_tensor_types(&first)?;
    if count > 1 {
        let prefix = written(first.as_bytes().len() + 1, |out, len| {
            // SAFETY: `out` holds `len` bytes (`written`'s buffer), of which llama.cpp writes
            // at most `len`, NUL included; `first` is NUL-terminated and only read.
            unsafe { sys::llama_split_prefix(out, len, first.as_ptr(), 0, count) }
        })?;
        for part in 1..count {
            // The prefix, `-NNNNN-of-NNNNN.gguf` and the NUL.
            let name = written(prefix.as_bytes().len() + 32, |out, len| {
                // SAFETY: as above, with `prefix` NUL-terminated and only read.
                unsafe { sys::llama_split_path(out, len, prefix.as_ptr(), part, count) }
            })?;
            types.extend(header_tensor_types(&name)?.0);
        }
    }
    Some(types)
}

/// The string a C function `write(buffer, capacity)` writes into a buffer of `capacity` bytes,
/// returning its length (as `snprintf` does); `None` when it wrote nothing or did not fit.
fn written(
    capacity: usize,
    write: impl FnOnce(*mut std::ffi::c_char, usize) -> std::ffi::c_int,
) -> Option<std::ffi::CString> {
    let mut buffer = vec![0u8; capacity];
    let len = usize::try_from(write(buffer.as_mut_ptr().cast(), capacity)).ok()?;
    if len == 0 || len >= capacity {
        return None;
    }
    buffer.truncate(len);
    std::ffi::CString::new(buffer).ok()
}

/// The tensor types listed in one GGUF file's header, and its `split.count` (1 when absent).
fn header_tensor_types(path: &std::ffi::CStr) -> Option<(Vec<sys::ggml_type>, i32)> {
    let params = sys::gguf_init_params {
        no_alloc: true,
        ctx: std::ptr::null_mut(),
    };
    // SAFETY: `path` is NUL-terminated; with `no_alloc` and no context asked for, ggml reads
    // the header into a `gguf_context` it allocates (or returns null, checked). Tensor ids
    // below `gguf_get_n_tensors` are valid; `split.count` is read as a `u16` only when its
    // type says so (ggml asserts the type); the context is freed once, after its last use.
    unsafe {
        let ctx = sys::gguf_init_from_file(path.as_ptr(), params);
        if ctx.is_null() {
            return None;
        }
        let key = sys::gguf_find_key(ctx, c"split.count".as_ptr());
        let count = if key < 0 {
            Some(1)
        } else if sys::gguf_get_kv_type(ctx, key) == sys::GGUF_TYPE_UINT16 {
            Some(i32::from(sys::gguf_get_val_u16(ctx, key)))
        } else {
            None
        };
        let types = (0..sys::gguf_get_n_tensors(ctx))
            .map(|i| sys::gguf_get_tensor_type(ctx, i))
            .collect();
        sys::gguf_free(ctx);
        Some((types, count?))
    }
}

/// ggml's version and commit, as its build recorded them.
pub(crate) fn ggml_version() -> String {
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::from("unknown")
        } else {
            // SAFETY: ggml returns pointers to static NUL-terminated strings it compiled in.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
    };
    // SAFETY: both functions take nothing and return static strings (or null, handled above).
    let (version, commit) = unsafe { (sys::ggml_version(), sys::ggml_commit()) };
    format!("{} ({})", text(version), text(commit))
}

unsafe extern "C" fn init_backend_hook(
    dev: sys::ggml_backend_dev_t,
    params: *const std::ffi::c_char,
) -> sys::ggml_backend_t {
    let Some(&original) = ORIGINAL_INIT.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: `original` is the CPU device's own `init_backend`, read from its table before the
    // hook replaced it; ggml calls this hook with the same arguments it would have passed it.
    let backend = unsafe { original(dev, params) };
    if !backend.is_null() && USE_REF.with(Cell::get) {
        // SAFETY: `backend` was just created by the CPU device's `init_backend`, so it is a
        // live CPU backend (`ggml_backend_cpu_set_use_ref` asserts `ggml_backend_is_cpu`), and
        // nothing else holds it yet.
        unsafe { sys::ggml_backend_cpu_set_use_ref(backend, true) };
        // SAFETY: the same live CPU backend, not yet handed to anyone.
        unsafe { install_attention(backend) };
    }
    backend
}

/// ggml's `struct ggml_backend_i` (`ggml/src/ggml-backend-impl.h` of the pinned llama.cpp):
/// a backend's function table, in declared order. Only the members wick reads are typed.
#[repr(C)]
struct BackendIface {
    get_name: Option<unsafe extern "C" fn(sys::ggml_backend_t) -> *const std::ffi::c_char>,
    free: *const std::ffi::c_void,
    set_tensor_async: *const std::ffi::c_void,
    get_tensor_async: *const std::ffi::c_void,
    set_tensor_2d_async: *const std::ffi::c_void,
    get_tensor_2d_async: *const std::ffi::c_void,
    cpy_tensor_async: *const std::ffi::c_void,
    synchronize: *const std::ffi::c_void,
    graph_plan_create: *const std::ffi::c_void,
    graph_plan_free: *const std::ffi::c_void,
    graph_plan_update: *const std::ffi::c_void,
    graph_plan_compute: *const std::ffi::c_void,
    graph_compute: Option<GraphCompute>,
    event_record: *const std::ffi::c_void,
    event_wait: *const std::ffi::c_void,
    graph_optimize: *const std::ffi::c_void,
}

/// ggml's `struct ggml_backend`: its guid, its function table by value, its device and context.
#[repr(C)]
struct BackendHead {
    guid: sys::ggml_guid_t,
    iface: BackendIface,
    device: sys::ggml_backend_dev_t,
    context: *mut std::ffi::c_void,
}

type GraphCompute =
    unsafe extern "C" fn(sys::ggml_backend_t, *mut sys::ggml_cgraph) -> sys::ggml_status;

/// The CPU backend's own `graph_compute`, saved before [`install_attention`] replaces it.
static ORIGINAL_COMPUTE: OnceLock<GraphCompute> = OnceLock::new();

/// Points a reference-kernel CPU backend's `graph_compute` at [`graph_compute_hook`], which
/// hands its flash attention and its matrix products of the quantized types wick's kernels
/// read to them ([`wick_kernels::attention`], [`wick_kernels::matmul`]), after checking the backend's layout
/// against ggml's public accessors. When the layout does not match, nothing is written and
/// ggml's reference kernels (also batch-invariant, slower) run.
///
/// # Safety
///
/// `backend` is a live CPU backend that nothing else uses yet.
unsafe fn install_attention(backend: sys::ggml_backend_t) {
    let head = backend.cast::<BackendHead>();
    // SAFETY: a `ggml_backend` is laid out as `BackendHead` in the pinned llama.cpp. That is
    // checked before anything is written: the guid and device members must be what
    // `ggml_backend_guid` and `ggml_backend_get_device` return (so the table between them has
    // the expected length), `get_name` must return `ggml_backend_name`'s pointer, and the CPU
    // backend's asynchronous members must be empty, as ggml-cpu declares them. The backend is
    // new, so no thread computes on it while its table changes.
    unsafe {
        let head = &mut *head;
        let Some(get_name) = head.iface.get_name else {
            return;
        };
        let Some(original) = head.iface.graph_compute else {
            return;
        };
        let matches = head.guid == sys::ggml_backend_guid(backend)
            && head.device == sys::ggml_backend_get_device(backend)
            && get_name(backend) == sys::ggml_backend_name(backend)
            && head.iface.set_tensor_async.is_null()
            && head.iface.get_tensor_async.is_null()
            && head.iface.cpy_tensor_async.is_null()
            && head.iface.synchronize.is_null();
        if !matches {
            tracing::warn!(
                "ggml's CPU backend is not laid out as expected: \
                 ggml's reference attention runs (batch-invariant, slower)"
            );
            return;
        }
        let original = *ORIGINAL_COMPUTE.get_or_init(|| original);
        if head
            .iface
            .graph_compute
            .is_some_and(|f| std::ptr::fn_addr_eq(f, original))
        {
            head.iface.graph_compute = Some(graph_compute_hook);
        }
    }
}

/// ggml's `struct ggml_custom_op_params` (`ggml/src/ggml-impl.h`): what a `GGML_OP_CUSTOM`
/// node keeps at the start of its `op_params`.
#[repr(C)]
struct CustomOpParams {
    fun: sys::ggml_custom_op_t,
    n_tasks: std::ffi::c_int,
    userdata: *mut std::ffi::c_void,
}

/// Where a converted node keeps its flash attention's `scale`, `max_bias` and `softcap`
/// (`op_params` indices), past the custom op's parameters.
const SAVED_PARAMS: usize = 8;
const _: () = assert!(std::mem::size_of::<CustomOpParams>() <= SAVED_PARAMS * 4);

/// The CPU backend's `graph_compute`, with every flash attention, matrix product (also per
/// expert), `SWIGLU`, `SILU`, `NORM` and maskless `SOFT_MAX` wick's kernels support turned
/// into custom ops that run them ([`attention_op`], [`matmul_op`], [`matmul_id_op`],
/// [`swiglu_op`], [`silu_op`], [`norm_op`], [`softmax_op`]) first ([`custom_op_of`] says
/// which). A node is converted once: a graph llama.cpp reuses keeps it converted.
unsafe extern "C" fn graph_compute_hook(
    backend: sys::ggml_backend_t,
    cgraph: *mut sys::ggml_cgraph,
) -> sys::ggml_status {
    // SAFETY: ggml calls this in place of the CPU backend's `graph_compute`, with a live graph
    // that only this call computes; its nodes are live tensors, rewritten before any thread
    // computes them. A converted node keeps its sources and shape; its `op_params` (16 `i32`s)
    // take the custom op's parameters at the start and keep the parameters its op reads
    // (`saved`, at most three) at `SAVED_PARAMS`.
    unsafe {
        for i in 0..sys::ggml_graph_n_nodes(cgraph) {
            let node = &mut *sys::ggml_graph_node(cgraph, i);
            let Some((fun, saved)) = custom_op_of(node) else {
                continue;
            };
            let mut kept = [0i32; 3];
            for (k, &p) in kept.iter_mut().zip(saved) {
                *k = node.op_params[p];
            }
            node.op_params[SAVED_PARAMS..SAVED_PARAMS + saved.len()]
                .copy_from_slice(&kept[..saved.len()]);
            let custom = CustomOpParams {
                fun: Some(fun),
                n_tasks: -1, // GGML_N_TASKS_MAX: every thread
                userdata: std::ptr::null_mut(),
            };
            std::ptr::write_unaligned(node.op_params.as_mut_ptr().cast::<CustomOpParams>(), custom);
            node.op = sys::GGML_OP_CUSTOM;
        }
        let original = ORIGINAL_COMPUTE
            .get()
            .expect("saved before the hook is installed");
        original(backend, cgraph)
    }
}

/// The custom op that computes `node` with wick's kernels, when one does, and which of the
/// node's `op_params` it reads (saved at `SAVED_PARAMS`, in order): an attention's scale,
/// maximum bias and soft cap; `SWIGLU`'s swap flag; `NORM`'s epsilon; `SOFT_MAX`'s scale.
///
/// # Safety
///
/// `node` is a live node of a graph about to be computed, its sources' data allocated.
unsafe fn custom_op_of(node: &sys::ggml_tensor) -> Option<(CustomOp, &'static [usize])> {
    let param = |i: usize| u32::try_from(node.op_params[i]).ok();
    // SAFETY: the caller's contract, which each `*_of` check takes.
    unsafe {
        match node.op {
            sys::GGML_OP_MUL_MAT => matmul_of(node).map(|_| (matmul_op as CustomOp, &[][..])),
            sys::GGML_OP_MUL_MAT_ID => {
                matmul_id_of(node).map(|_| (matmul_id_op as CustomOp, &[][..]))
            }
            sys::GGML_OP_FLASH_ATTN_EXT => {
                attention_of(node).map(|_| (attention_op as CustomOp, &[0, 1, 2][..]))
            }
            sys::GGML_OP_GLU if param(0) == Some(sys::GGML_GLU_OP_SWIGLU) => {
                swiglu_of(node, node.op_params[1] != 0).map(|_| (swiglu_op as CustomOp, &[1][..]))
            }
            sys::GGML_OP_NORM => row_op_of(node).map(|_| (norm_op as CustomOp, &[0][..])),
            // Without a mask or sinks (a router's): the mask's broadcast and ALiBi stay
            // ggml's (wick's attention computes its own softmax).
            sys::GGML_OP_SOFT_MAX if node.src[1].is_null() && node.src[2].is_null() => {
                row_op_of(node).map(|_| (softmax_op as CustomOp, &[0][..]))
            }
            sys::GGML_OP_UNARY if param(0) == Some(sys::GGML_UNARY_OP_SILU) => {
                row_op_of(node).map(|_| (silu_op as CustomOp, &[][..]))
            }
            _ => None,
        }
    }
}

/// A custom op's thread index and count as ggml passes them (`ith` of `nth`), as `usize`.
fn thread_of(ith: std::ffi::c_int, nth: std::ffi::c_int) -> Option<(usize, usize)> {
    Some((usize::try_from(ith).ok()?, usize::try_from(nth).ok()?))
}

/// ggml's per-thread call of a converted attention node.
unsafe extern "C" fn attention_op(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    _userdata: *mut std::ffi::c_void,
) {
    // SAFETY: ggml passes the converted node, whose sources and data are live for the op; its
    // inputs were checked by `attention_of` when it was converted (shape, types, contiguity)
    // and are only read. Each output row is written by exactly one thread (the kernel splits
    // the rows between `nth` threads by `ith`), inside `dst`'s data: row `i` of `dv` floats at
    // `i * dv` floats (`nb[1]` is `4 · dv`, checked), `i` below `streams × rows × heads`,
    // which `attention_of` checked is its size.
    unsafe {
        let node = &*dst;
        let Some(attention) = attention_of(node) else {
            return;
        };
        let base = node.data.cast::<f32>();
        let width = attention.shape.dv;
        let Some((ith, nth)) = thread_of(ith, nth) else {
            return;
        };
        attention.run(ith, nth, &mut |row, values| {
            std::ptr::copy_nonoverlapping(values.as_ptr(), base.add(row * width), values.len());
        });
    }
}

/// ggml's per-thread call of a converted `SWIGLU`.
unsafe extern "C" fn swiglu_op(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    _userdata: *mut std::ffi::c_void,
) {
    // SAFETY: ggml passes the converted node, whose sources and data are live for the op; its
    // inputs were checked by `swiglu_of` when it was converted (types, shapes, strides, no
    // overlap with the output) and are only read. Each output row is written by exactly one
    // thread (`rows_of` splits the rows between `nth` threads by `ith`), `nc` floats at
    // `row · nb[1]` bytes inside `dst`'s data (checked by `swiglu_of`).
    unsafe {
        let node = &*dst;
        let Some(glu) = swiglu_of(node, node.op_params[SAVED_PARAMS] != 0) else {
            return;
        };
        let Some((ith, nth)) = thread_of(ith, nth) else {
            return;
        };
        let base = node.data.cast::<f32>();
        for row in wick_kernels::activation::rows_of(glu.rows, ith, nth) {
            let out = std::slice::from_raw_parts_mut(base.add(row * glu.out_stride), glu.width);
            let (x, g) = glu.row(row);
            wick_kernels::activation::swiglu(x, g, out);
        }
    }
}

/// A custom op's per-thread function, as ggml calls it.
type CustomOp = unsafe extern "C" fn(
    *mut sys::ggml_tensor,
    std::ffi::c_int,
    std::ffi::c_int,
    *mut std::ffi::c_void,
);

/// ggml's per-thread call of a converted `NORM` (layer norm).
unsafe extern "C" fn norm_op(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    _userdata: *mut std::ffi::c_void,
) {
    // SAFETY: as `each_row`'s: `dst` is a node converted from `NORM`.
    unsafe {
        let eps = f32::from_ne_bytes((*dst).op_params[SAVED_PARAMS].to_ne_bytes());
        each_row(dst, ith, nth, |row| {
            wick_kernels::norm::layer_norm_in_place(row, eps);
        });
    }
}

/// ggml's per-thread call of a converted `SOFT_MAX` (without a mask or sinks).
unsafe extern "C" fn softmax_op(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    _userdata: *mut std::ffi::c_void,
) {
    // SAFETY: as `each_row`'s: `dst` is a node converted from `SOFT_MAX`.
    unsafe {
        let scale = f32::from_ne_bytes((*dst).op_params[SAVED_PARAMS].to_ne_bytes());
        each_row(dst, ith, nth, |row| wick_kernels::norm::softmax(row, scale));
    }
}

/// ggml's per-thread call of a converted `SILU` (unary).
unsafe extern "C" fn silu_op(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    _userdata: *mut std::ffi::c_void,
) {
    // SAFETY: as `each_row`'s: `dst` is a node converted from `SILU`.
    unsafe {
        each_row(dst, ith, nth, |row| {
            for x in row {
                *x = wick_kernels::activation::silu(*x);
            }
        });
    }
}

/// Thread `ith`'s share (of `nth`) of a converted row-wise node: each of its rows copied from
/// the source to the output and `op` applied there.
///
/// # Safety
///
/// `dst` is a node `graph_compute_hook` converted from a row-wise op, whose source and data
/// are live while ggml runs it.
unsafe fn each_row(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    op: impl Fn(&mut [f32]),
) {
    // SAFETY: the caller's contract; source and output were checked by `row_op_of` when the
    // node was converted (F32, contiguous rows inside each tensor's data, the output either
    // the source itself or apart from it). Each row is written by exactly one thread
    // (`rows_of` splits them by `ith`): its `width` source floats are copied to its output
    // row (the same floats when the two are one), which `op` then rewrites; no other thread
    // reads or writes either row meanwhile.
    unsafe {
        let Some(rows) = row_op_of(&*dst) else {
            return;
        };
        let Some((ith, nth)) = thread_of(ith, nth) else {
            return;
        };
        for row in wick_kernels::activation::rows_of(rows.rows, ith, nth) {
            let (from, to) = rows.row(row);
            let out = rows.out.add(to);
            std::ptr::copy(rows.x.add(from), out, rows.width);
            op(std::slice::from_raw_parts_mut(out, rows.width));
        }
    }
}

/// A row-wise op's rows: `rows` rows of `width` floats, each at its offset (floats) from `x`
/// and from `out`, through ggml's strides of dimensions 1–3 (in floats).
struct RowOp {
    x: *const f32,
    out: *mut f32,
    width: usize,
    rows: usize,
    /// Dimensions 1 and 2's sizes (a row's index → its position).
    ne: [usize; 2],
    x_stride: [usize; 3],
    out_stride: [usize; 3],
}

impl RowOp {
    /// Row `row`'s offsets (floats) in the source and in the output.
    fn row(&self, row: usize) -> (usize, usize) {
        let at = [
            row % self.ne[0],
            row / self.ne[0] % self.ne[1],
            row / (self.ne[0] * self.ne[1]),
        ];
        let offset = |stride: &[usize; 3]| at.iter().zip(stride).map(|(i, s)| i * s).sum();
        (offset(&self.x_stride), offset(&self.out_stride))
    }
}

/// The rows of a row-wise node (`NORM`, `SOFT_MAX`, `SILU`, or one converted from them) when wick's
/// kernels can take them: F32 source 0 and output of one shape, each row contiguous, strides
/// in whole floats, and the output either the source itself (same data, same strides) or
/// apart from it.
///
/// # Safety
///
/// `node` is a live node whose source 0 is set and allocated.
unsafe fn row_op_of(node: &sys::ggml_tensor) -> Option<RowOp> {
    // SAFETY: the caller's contract: source 0 is set.
    let x = unsafe { node.src[0].as_ref()? };
    let dims = |t: &sys::ggml_tensor| -> Option<[usize; 4]> {
        let mut d = [0; 4];
        for (d, &ne) in d.iter_mut().zip(&t.ne) {
            *d = usize::try_from(ne).ok().filter(|&n| n > 0)?;
        }
        Some(d)
    };
    let strides = |t: &sys::ggml_tensor| -> Option<[usize; 3]> {
        let s = [t.nb[1], t.nb[2], t.nb[3]];
        s.iter()
            .all(|b| b.is_multiple_of(4))
            .then(|| s.map(|b| b / 4))
    };
    let f32_rows =
        |t: &sys::ggml_tensor| t.type_ == sys::GGML_TYPE_F32 && t.nb[0] == 4 && !t.data.is_null();
    let shape = dims(node)?;
    if !(f32_rows(node) && f32_rows(x) && dims(x)? == shape) {
        return None;
    }
    let (x_stride, out_stride) = (strides(x)?, strides(node)?);
    // The floats a tensor's rows span, from its first.
    let span = |stride: &[usize; 3]| {
        shape[0]
            + (1..4)
                .map(|i| (shape[i] - 1) * stride[i - 1])
                .sum::<usize>()
    };
    let (x_at, out_at) = (x.data as usize, node.data as usize);
    let same = x_at == out_at && x_stride == out_stride;
    let apart = out_at + 4 * span(&out_stride) <= x_at || x_at + 4 * span(&x_stride) <= out_at;
    if !(same || apart) {
        return None;
    }
    Some(RowOp {
        x: x.data.cast::<f32>(),
        out: node.data.cast::<f32>(),
        width: shape[0],
        rows: shape[1] * shape[2] * shape[3],
        ne: [shape[1], shape[2]],
        x_stride,
        out_stride,
    })
}

/// One `SWIGLU`'s inputs: `rows` rows of `width` values, `x` (activated) and `g` (gate), and
/// the output's row stride (floats).
struct SwiGlu<'a> {
    x: &'a [f32],
    g: &'a [f32],
    x_stride: usize,
    g_stride: usize,
    out_stride: usize,
    width: usize,
    rows: usize,
}

impl SwiGlu<'_> {
    fn row(&self, row: usize) -> (&[f32], &[f32]) {
        (
            &self.x[row * self.x_stride..][..self.width],
            &self.g[row * self.g_stride..][..self.width],
        )
    }
}

/// The `SWIGLU` a `GGML_OP_GLU` node (or one converted from it) computes, when wick's
/// activation does: F32 throughout, contiguous rows one stride apart (2-D, or 3-D/4-D whose
/// higher dimensions continue the rows: a mixture of experts' slots × tokens), one source
/// split in halves (which half is activated: `swapped`) or two sources, and an output that
/// overlaps neither.
///
/// # Safety
///
/// `node` is a live `GGML_OP_GLU` node (or one `graph_compute_hook` converted) whose sources'
/// data is allocated.
unsafe fn swiglu_of(node: &sys::ggml_tensor, swapped: bool) -> Option<SwiGlu<'_>> {
    // SAFETY: the caller's contract: source 0 is set, source 1 may be.
    let (a, b) = unsafe { (node.src[0].as_ref()?, node.src[1].as_ref()) };
    let dim = |t: &sys::ggml_tensor, i: usize| usize::try_from(t.ne[i]).ok();
    // Rows one stride apart through dimensions 1–3 (2-D, or a mixture of experts' 3-D
    // activations: slots × tokens), as many as the output's.
    let (width, rows) = (dim(node, 0)?, dim(node, 1)? * dim(node, 2)? * dim(node, 3)?);
    let flat = |t: &sys::ggml_tensor| {
        t.ne[1..] == node.ne[1..]
            && (t.ne[2] == 1 || t.nb[2] == t.nb[1] * dim(t, 1).unwrap_or(0))
            && (t.ne[3] == 1 || t.nb[3] == t.nb[2] * dim(t, 2).unwrap_or(0))
    };
    let f32_rows = |t: &sys::ggml_tensor| {
        t.type_ == sys::GGML_TYPE_F32
            && t.nb[0] == 4
            && t.nb[1].is_multiple_of(4)
            && !t.data.is_null()
    };
    let fits = width > 0
        && rows > 0
        && f32_rows(node)
        && f32_rows(a)
        && flat(node)
        && flat(a)
        && node.nb[1] >= 4 * width
        && match b {
            None => dim(a, 0)? == 2 * width,
            Some(b) => f32_rows(b) && flat(b) && dim(a, 0)? == width && dim(b, 0)? == width,
        };
    if !fits {
        return None;
    }
    let span = |t: &sys::ggml_tensor| (rows - 1) * (t.nb[1] / 4) + dim(t, 0).unwrap_or(0);
    let out_bytes = 4 * ((rows - 1) * (node.nb[1] / 4) + width);
    let overlaps = |t: &sys::ggml_tensor| {
        let (start, out) = (t.data as usize, node.data as usize);
        start < out + out_bytes && out < start + 4 * span(t)
    };
    if overlaps(a) || b.is_some_and(overlaps) {
        return None;
    }
    // SAFETY: each slice spans its tensor's rows as ggml addresses them (the last row ends the
    // slice), inside its allocated data, F32 as checked above; they are only read while the op
    // runs, and the output does not overlap them.
    let (xa, xb) = unsafe {
        (
            std::slice::from_raw_parts(a.data.cast::<f32>(), span(a)),
            b.map(|b| std::slice::from_raw_parts(b.data.cast::<f32>(), span(b))),
        )
    };
    let stride = a.nb[1] / 4;
    let (x, g, x_stride, g_stride) = match xb {
        Some(g) => (xa, g, stride, b.map_or(0, |b| b.nb[1] / 4)),
        // One source: its rows hold the activated half and the gate side by side.
        None if swapped => (&xa[width..], xa, stride, stride),
        None => (xa, &xa[width..], stride, stride),
    };
    Some(SwiGlu {
        x,
        g,
        x_stride,
        g_stride,
        out_stride: node.nb[1] / 4,
        width,
        rows,
    })
}

/// ggml's per-thread call of a converted matrix product.
unsafe extern "C" fn matmul_op(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    _userdata: *mut std::ffi::c_void,
) {
    // SAFETY: ggml passes the converted node, whose sources and data are live for the op; its
    // inputs were checked by `matmul_of` when it was converted (types, shapes, strides, no
    // overlap with the output) and are only read. Each output element is written by exactly
    // one thread (each slice's product splits its weight rows between `nth` threads by `ith`),
    // inside `dst`'s data: slice `(i2, i3)` below `ne[2]` and `ne[3]` at
    // `i2 · nb[2] + i3 · nb[3]` bytes, its input row `i` below `ne[1]`, weight rows
    // `first..first + len` below `ne[0]`, at `i · nb[1] + 4 · first` bytes past it (`nb[0]`
    // is 4, the others multiples of 4, and no two slices share an element: checked).
    unsafe {
        let node = &*dst;
        let Some(products) = matmul_of(node) else {
            return;
        };
        let Some((ith, nth)) = thread_of(ith, nth) else {
            return;
        };
        let stride = products.out_stride[0];
        for (i2, i3) in products.slices() {
            let base = node.data.cast::<f32>().add(products.out_at(i2, i3));
            products.of(i2, i3).run(ith, nth, &mut |i, first, values| {
                std::ptr::copy_nonoverlapping(
                    values.as_ptr(),
                    base.add(i * stride + first),
                    values.len(),
                );
            });
        }
    }
}

/// ggml's per-thread call of a converted `MUL_MAT_ID` (a mixture of experts' products).
unsafe extern "C" fn matmul_id_op(
    dst: *mut sys::ggml_tensor,
    ith: std::ffi::c_int,
    nth: std::ffi::c_int,
    _userdata: *mut std::ffi::c_void,
) {
    // SAFETY: ggml passes the converted node, whose sources and data are live for the op;
    // `matmul_id_of` checked them when it was converted (types, shapes, strides, no overlap
    // of the output with the inputs or the expert ids). The expert ids were computed before
    // this op (they are its source), `I32` at whole-element strides (checked); one out of
    // range is skipped. Each output element is written by exactly one thread (each expert's
    // product splits its weight rows between `nth` threads by `ith`), at
    // `slot · nb[1] + token · nb[2] + 4 · row` bytes (strides in whole floats, checked) inside
    // `dst`'s data, `slot`, `token` and `row` below their sizes.
    unsafe {
        let node = &*dst;
        let Some(product) = matmul_id_of(node) else {
            return;
        };
        let Some((ith, nth)) = thread_of(ith, nth) else {
            return;
        };
        let ids = &*node.src[2];
        let id = |slot: usize, token: usize| {
            let at = ids.data.cast::<i32>().add(slot + token * (ids.nb[1] / 4));
            usize::try_from(at.read()).ok()
        };
        let base = node.data.cast::<f32>();
        let (slot_stride, token_stride) = (node.nb[1] / 4, node.nb[2] / 4);
        GATHERED.with(|gathered| {
            let mut gathered = gathered.borrow_mut();
            let Gathered {
                starts,
                cursor,
                pairs,
                inputs,
            } = &mut *gathered;
            // The (slot, token) pairs grouped by expert in one pass (a counting sort, in token
            // then slot order within an expert): `pairs[starts[e]..starts[e + 1]]` are expert
            // `e`'s. An id out of range is left out.
            let routed = || {
                (0..product.tokens).flat_map(|token| {
                    (0..product.slots).filter_map(move |slot| {
                        id(slot, token)
                            .filter(|&e| e < product.experts)
                            .map(|e| (e, slot, token))
                    })
                })
            };
            starts.clear();
            starts.resize(product.experts + 1, 0);
            for (e, _, _) in routed() {
                starts[e + 1] += 1;
            }
            for e in 0..product.experts {
                starts[e + 1] += starts[e];
            }
            pairs.clear();
            pairs.resize(starts[product.experts], (0, 0));
            cursor.clear();
            cursor.extend_from_slice(starts);
            for (e, slot, token) in routed() {
                pairs[cursor[e]] = (slot, token);
                cursor[e] += 1;
            }
            for expert in 0..product.experts {
                let routed = &pairs[starts[expert]..starts[expert + 1]];
                if routed.is_empty() {
                    continue;
                }
                inputs.clear();
                for &(slot, token) in routed {
                    inputs.extend_from_slice(product.input(slot, token));
                }
                let matmul = product.of(expert, inputs);
                matmul.run(ith, nth, &mut |i, first, values| {
                    let (slot, token) = routed[i];
                    let at = slot * slot_stride + token * token_stride + first;
                    std::ptr::copy_nonoverlapping(values.as_ptr(), base.add(at), values.len());
                });
            }
        });
    }
}

/// What [`matmul_id_op`] gathers, per thread, in buffers kept between calls (a decode step
/// calls it once per layer): the (slot, token) pairs grouped by expert
/// (`starts[e]..starts[e + 1]` are expert `e`'s; `cursor` places them), and one expert's
/// inputs at a time.
#[derive(Default)]
struct Gathered {
    starts: Vec<usize>,
    cursor: Vec<usize>,
    pairs: Vec<(usize, usize)>,
    inputs: Vec<f32>,
}

thread_local! {
    static GATHERED: std::cell::RefCell<Gathered> = std::cell::RefCell::new(Gathered::default());
}

/// A `MUL_MAT_ID`'s views: `experts` weight matrices of `rows` rows of `k` values one after
/// another, and F32 inputs per (slot, token) (a slot past the inputs' own reads their slot 0:
/// ggml's broadcast).
struct MatMulId<'a> {
    /// The experts' matrices.
    w: Matrices<'a>,
    experts: usize,
    slots: usize,
    tokens: usize,
    /// Bytes from one expert's matrix to the next.
    expert_stride: usize,
    x: &'a [f32],
    /// The inputs' slots, and floats from one slot and one token to the next.
    x_slots: usize,
    x_stride: [usize; 2],
}

impl MatMulId<'_> {
    /// The input row of `slot` and `token`.
    fn input(&self, slot: usize, token: usize) -> &[f32] {
        let at = (slot % self.x_slots) * self.x_stride[0] + token * self.x_stride[1];
        &self.x[at..at + self.w.k]
    }

    /// The product of `expert`'s weights with `inputs` (rows of `k`).
    fn of<'b>(&'b self, expert: usize, inputs: &'b [f32]) -> wick_kernels::matmul::MatMul<'b> {
        use wick_kernels::matmul::{Inputs, MatMul};
        let k = self.w.k;
        MatMul {
            k,
            w: self.w.at(expert * self.expert_stride),
            x: Inputs {
                data: inputs,
                stride: k,
                rows: inputs.len() / k,
            },
        }
    }
}

/// The products a `GGML_OP_MUL_MAT_ID` node (or one converted from it) computes, when wick's
/// kernel computes them: weights of one of its types (3-D: experts of 2-D matrices, plain
/// host memory, blocks contiguous in each row), F32 inputs (3-D: slots × tokens, each row
/// contiguous), `I32` expert ids (slots × tokens), and an F32 output (rows × slots × tokens,
/// each row contiguous) that overlaps none of them.
///
/// # Safety
///
/// `node` is a live `GGML_OP_MUL_MAT_ID` node (or one `graph_compute_hook` converted) whose
/// sources' data is allocated.
unsafe fn matmul_id_of(node: &sys::ggml_tensor) -> Option<MatMulId<'_>> {
    // SAFETY: the caller's contract: sources 0–2 are set.
    let (w, x, ids) = unsafe {
        (
            node.src[0].as_ref()?,
            node.src[1].as_ref()?,
            node.src[2].as_ref()?,
        )
    };
    let dim = |t: &sys::ggml_tensor, i: usize| usize::try_from(t.ne[i]).ok().filter(|&n| n > 0);
    let (k, rows, experts) = (dim(w, 0)?, dim(w, 1)?, dim(w, 2)?);
    let (slots, tokens) = (dim(ids, 0)?, dim(ids, 1)?);
    let x_slots = dim(x, 1)?;
    let format = kernel_format(w.type_)?;
    // SAFETY: a weight's buffer (null for none, checked) and its type are ggml's, alive with it.
    let plain = unsafe {
        !w.buffer.is_null()
            && sys::ggml_backend_buft_is_host(sys::ggml_backend_buffer_get_type(w.buffer))
    };
    let (block, values) = (format.block_bytes(), format.block_values());
    let row_bytes = k / values * block;
    let fits = plain
        && wick_kernels::matmul::supports(format)
        && x.type_ == sys::GGML_TYPE_F32
        && ids.type_ == sys::GGML_TYPE_I32
        && node.type_ == sys::GGML_TYPE_F32
        && k.is_multiple_of(format.row_multiple())
        && w.ne[3] == 1
        && x.ne[3] == 1
        && ids.ne[2] == 1
        && ids.ne[3] == 1
        && node.ne[3] == 1
        && dim(x, 0)? == k
        && dim(x, 2)? == tokens
        && (x_slots == 1 || x_slots == slots)
        && dim(node, 0)? == rows
        && dim(node, 1)? == slots
        && dim(node, 2)? == tokens
        && w.nb[0] == block
        && w.nb[1] >= row_bytes
        && w.nb[2] >= (rows - 1) * w.nb[1] + row_bytes
        && x.nb[0] == 4
        && x.nb[1].is_multiple_of(4)
        && x.nb[2].is_multiple_of(4)
        && ids.nb[0] == 4
        && ids.nb[1].is_multiple_of(4)
        && node.nb[0] == 4
        && node.nb[1].is_multiple_of(4)
        && node.nb[2].is_multiple_of(4)
        && node.nb[1] >= 4 * rows
        && node.nb[2] >= node.nb[1] * slots
        && !w.data.is_null()
        && !x.data.is_null()
        && !ids.data.is_null()
        && !node.data.is_null();
    if !fits {
        return None;
    }
    let w_len = (experts - 1) * w.nb[2] + (rows - 1) * w.nb[1] + row_bytes;
    let x_len = ((x_slots - 1) * x.nb[1] + (tokens - 1) * x.nb[2]) / 4 + k;
    let ids_bytes = (slots - 1) * ids.nb[0] + (tokens - 1) * ids.nb[1] + 4;
    let out_bytes = (slots - 1) * node.nb[1] + (tokens - 1) * node.nb[2] + 4 * rows;
    let out_start = node.data as usize;
    let overlaps =
        |start: usize, len: usize| start < out_start + out_bytes && out_start < start + len;
    if overlaps(x.data as usize, 4 * x_len) || overlaps(ids.data as usize, ids_bytes) {
        return None;
    }
    // SAFETY: each slice spans its tensor's elements as ggml addresses them (the last
    // element ends the slice), inside the tensor's allocated data, with the element type
    // checked above; they are only read while the op runs, and the output does not overlap
    // them (checked above).
    unsafe {
        Some(MatMulId {
            w: Matrices {
                format,
                k,
                rows,
                row_stride: w.nb[1],
                bytes: std::slice::from_raw_parts(w.data.cast::<u8>(), w_len),
            },
            experts,
            slots,
            tokens,
            expert_stride: w.nb[2],
            x: std::slice::from_raw_parts(x.data.cast::<f32>(), x_len),
            x_slots,
            x_stride: [x.nb[1] / 4, x.nb[2] / 4],
        })
    }
}

/// Weight matrices of one shape in one tensor (a `MUL_MAT_ID`'s experts, a 3-D or 4-D
/// `MUL_MAT`'s slices): each `rows` rows of `k` values in `format`, `row_stride` bytes apart.
struct Matrices<'a> {
    format: wick_kernels::matmul::Format,
    k: usize,
    rows: usize,
    row_stride: usize,
    /// Every matrix's bytes, from the first's first row.
    bytes: &'a [u8],
}

impl<'a> Matrices<'a> {
    /// The matrix whose first row starts at byte `at` (the view ends with its last row's last
    /// block).
    fn at(&self, at: usize) -> wick_kernels::matmul::Weights<'a> {
        let (format, rows, stride) = (self.format, self.rows, self.row_stride);
        let row_bytes = self.k / format.block_values() * format.block_bytes();
        wick_kernels::matmul::Weights {
            format,
            data: &self.bytes[at..at + (rows - 1) * stride + row_bytes],
            stride,
            rows,
        }
    }
}

/// A `MUL_MAT` node's products, as views: one 2-D product per slice of the output's dimensions
/// 2 and 3 (a 2-D node has one), the weights' slice `(i2 / ratio[0], i3 / ratio[1])` times
/// the inputs' slice `(i2, i3)`, ggml's broadcast of the weights over the inputs.
struct Products<'a> {
    /// The weights' slices.
    w: Matrices<'a>,
    batch: usize,
    /// Bytes from one weight slice to the next in dimensions 2 and 3.
    w_stride: [usize; 2],
    /// Every input slice's values, from the first's first row.
    x: &'a [f32],
    /// Floats from one input row to the next, and from one slice to the next.
    x_stride: [usize; 3],
    /// The output's (and the inputs') slices in dimensions 2 and 3.
    slices: [usize; 2],
    /// Input slices per weight slice in dimensions 2 and 3.
    ratio: [usize; 2],
    /// Floats from one output row to the next, and from one slice to the next.
    out_stride: [usize; 3],
}

impl Products<'_> {
    /// Every slice `(i2, i3)`, in order.
    fn slices(&self) -> impl Iterator<Item = (usize, usize)> {
        let [n2, n3] = self.slices;
        (0..n3).flat_map(move |i3| (0..n2).map(move |i2| (i2, i3)))
    }

    /// The product of slice `(i2, i3)`.
    fn of(&self, i2: usize, i3: usize) -> wick_kernels::matmul::MatMul<'_> {
        use wick_kernels::matmul::{Inputs, MatMul};
        let w_at = i2 / self.ratio[0] * self.w_stride[0] + i3 / self.ratio[1] * self.w_stride[1];
        let x_at = i2 * self.x_stride[1] + i3 * self.x_stride[2];
        let k = self.w.k;
        MatMul {
            k,
            w: self.w.at(w_at),
            x: Inputs {
                data: &self.x[x_at..x_at + (self.batch - 1) * self.x_stride[0] + k],
                stride: self.x_stride[0],
                rows: self.batch,
            },
        }
    }

    /// Where slice `(i2, i3)` of the output starts, in floats from the output's start.
    fn out_at(&self, i2: usize, i3: usize) -> usize {
        i2 * self.out_stride[1] + i3 * self.out_stride[2]
    }
}

/// The products a `GGML_OP_MUL_MAT` node (or one converted from it) computes, as views, when
/// wick's kernel ([`wick_kernels::matmul`]) computes them (only where its vector paths are
/// compiled in: elsewhere ggml's reference product, which has its own SIMD, is faster):
/// weights of one of [`wick_kernels::matmul::Format`]'s types (2-D matrices, up to 4-D
/// slices of them, blocks contiguous in each row, in plain host memory) times F32 inputs
/// (rows contiguous, slices a whole multiple of the weights' in dimensions 2 and 3) into an
/// F32 output (rows contiguous, no two slices sharing an element) that does not overlap the
/// inputs. Slices past dimension 1 are those of multi-head latent attention (DeepSeek 2's
/// absorbed key and value matrices, one per head).
///
/// # Safety
///
/// `node` is a live `GGML_OP_MUL_MAT` node (or one `graph_compute_hook` converted) whose
/// sources' data is allocated.
unsafe fn matmul_of(node: &sys::ggml_tensor) -> Option<Products<'_>> {
    // SAFETY: the caller's contract: sources 0 and 1 are set.
    let (w, x) = unsafe { (node.src[0].as_ref()?, node.src[1].as_ref()?) };
    let dim = |t: &sys::ggml_tensor, i: usize| usize::try_from(t.ne[i]).ok().filter(|&n| n > 0);
    let (k, rows, batch) = (dim(w, 0)?, dim(w, 1)?, dim(x, 1)?);
    let (w2, w3) = (dim(w, 2)?, dim(w, 3)?);
    let (n2, n3) = (dim(x, 2)?, dim(x, 3)?);
    let format = kernel_format(w.type_)?;
    // SAFETY: a weight's buffer (null for none, checked) and its type are ggml's, alive with it.
    let plain = unsafe {
        !w.buffer.is_null()
            && sys::ggml_backend_buft_is_host(sys::ggml_backend_buffer_get_type(w.buffer))
    };
    // A weight in an extra buffer type (`CPU_REPACK`) is interleaved for ggml's own kernels.
    if !plain {
        return None;
    }
    let (block, values) = (format.block_bytes(), format.block_values());
    let row_bytes = k / values * block;
    // Whole blocks (and, for the floats, whole lane groups of 8) per row.
    let multiple = format.row_multiple();
    let floats = |t: &sys::ggml_tensor| (1..4).all(|i| t.nb[i].is_multiple_of(4));
    let fits = wick_kernels::matmul::supports(format)
        && x.type_ == sys::GGML_TYPE_F32
        && node.type_ == sys::GGML_TYPE_F32
        && k.is_multiple_of(multiple)
        && n2.is_multiple_of(w2)
        && n3.is_multiple_of(w3)
        && dim(x, 0)? == k
        && dim(node, 0)? == rows
        && dim(node, 1)? == batch
        && dim(node, 2)? == n2
        && dim(node, 3)? == n3
        && w.nb[0] == block
        && w.nb[1] >= row_bytes
        && x.nb[0] == 4
        && floats(x)
        && x.nb[1] >= 4 * k
        && node.nb[0] == 4
        && floats(node)
        && node.nb[1] >= 4 * rows
        // Each slice's outputs past the one before's (ggml's own layout): no element twice.
        && (n2 == 1 || node.nb[2] >= (batch - 1) * node.nb[1] + 4 * rows)
        && (n3 == 1 || node.nb[3] >= (n2 - 1) * node.nb[2] + (batch - 1) * node.nb[1] + 4 * rows)
        && !w.data.is_null()
        && !x.data.is_null()
        && !node.data.is_null();
    if !fits {
        return None;
    }
    let w_len = (w2 - 1) * w.nb[2] + (w3 - 1) * w.nb[3] + (rows - 1) * w.nb[1] + row_bytes;
    let x_len = ((n2 - 1) * x.nb[2] + (n3 - 1) * x.nb[3] + (batch - 1) * x.nb[1]) / 4 + k;
    let out_bytes =
        (n2 - 1) * node.nb[2] + (n3 - 1) * node.nb[3] + (batch - 1) * node.nb[1] + 4 * rows;
    let (x_start, out_start) = (x.data as usize, node.data as usize);
    if x_start < out_start + out_bytes && out_start < x_start + 4 * x_len {
        return None;
    }
    // SAFETY: each slice spans its tensor's elements as ggml addresses them (the last slice's
    // last row's last element ends the slice), inside the tensor's allocated data, with the
    // element type checked above; they are only read while the op runs, and the output
    // (written by the op) does not overlap the inputs (checked above).
    unsafe {
        Some(Products {
            w: Matrices {
                format,
                k,
                rows,
                row_stride: w.nb[1],
                bytes: std::slice::from_raw_parts(w.data.cast::<u8>(), w_len),
            },
            batch,
            w_stride: [w.nb[2], w.nb[3]],
            x: std::slice::from_raw_parts(x.data.cast::<f32>(), x_len),
            x_stride: [x.nb[1] / 4, x.nb[2] / 4, x.nb[3] / 4],
            slices: [n2, n3],
            ratio: [n2 / w2, n3 / w3],
            out_stride: [node.nb[1] / 4, node.nb[2] / 4, node.nb[3] / 4],
        })
    }
}

/// The attention a flash-attention node (or one converted from it) computes, as views, when
/// the kernel supports it: F32 queries, keys and values of [`CACHE_TYPES`] (the KV cache's
/// types), an F16 mask (or none), F32 sinks (or none), rows contiguous, and an F32 output in
/// ggml's permuted layout.
///
/// # Safety
///
/// `node` is a live `GGML_OP_FLASH_ATTN_EXT` node (or one `graph_compute_hook` converted)
/// whose sources' data is allocated.
unsafe fn attention_of(node: &sys::ggml_tensor) -> Option<wick_kernels::attention::Attention<'_>> {
    use wick_kernels::attention::{Attention, Params, Shape};
    // SAFETY: the caller's contract: sources 0–2 are set, 3 and 4 may be null.
    let (query, key, value, mask, sinks) = unsafe {
        (
            node.src[0].as_ref()?,
            node.src[1].as_ref()?,
            node.src[2].as_ref()?,
            node.src[3].as_ref(),
            node.src[4].as_ref(),
        )
    };
    let dim = |t: &sys::ggml_tensor, i: usize| usize::try_from(t.ne[i]).ok();
    let shape = Shape {
        dk: dim(key, 0)?,
        dv: dim(value, 0)?,
        rows: dim(query, 1)?,
        heads: dim(query, 2)?,
        streams: dim(query, 3)?,
        cells: dim(key, 1)?,
        k_heads: dim(key, 2)?,
        k_streams: dim(key, 3)?,
        v_heads: dim(value, 2)?,
        v_streams: dim(value, 3)?,
        mask_heads: mask.map_or(Some(1), |m| dim(m, 2))?,
        mask_streams: mask.map_or(Some(1), |m| dim(m, 3))?,
    };
    let cache_type = |t: &sys::ggml_tensor| CACHE_TYPES.contains(&t.type_);
    let fits = query.type_ == sys::GGML_TYPE_F32
        && cache_type(key)
        && cache_type(value)
        && node.type_ == sys::GGML_TYPE_F32
        && dim(query, 0)? == shape.dk
        && dim(value, 1)? == shape.cells
        && mask.is_none_or(|m| {
            m.type_ == sys::GGML_TYPE_F16
                && dim(m, 0) >= Some(shape.cells)
                && dim(m, 1) >= Some(shape.rows)
        })
        && sinks.is_none_or(|s| s.type_ == sys::GGML_TYPE_F32 && dim(s, 0) >= Some(shape.heads))
        && dim(node, 0)? == shape.dv
        && dim(node, 1)? == shape.heads
        && dim(node, 2)? == shape.rows
        && dim(node, 3)? == shape.streams
        && node.nb[0] == 4
        && node.nb[1] == 4 * shape.dv
        && node.nb[2] == node.nb[1] * shape.heads
        && node.nb[3] == node.nb[2] * shape.rows
        && Attention::supported(&shape);
    if !fits {
        return None;
    }
    let params = if node.op == sys::GGML_OP_CUSTOM {
        &node.op_params[SAVED_PARAMS..SAVED_PARAMS + 3]
    } else {
        &node.op_params[..3]
    };
    let params = Params {
        scale: f32::from_ne_bytes(params[0].to_ne_bytes()),
        max_bias: f32::from_ne_bytes(params[1].to_ne_bytes()),
        softcap: f32::from_ne_bytes(params[2].to_ne_bytes()),
    };
    // SAFETY: each view spans its tensor's elements as ggml addresses them (the last element
    // is at the sum of (ne[i] − 1) · nb[i] bytes), inside the tensor's allocated data, and the
    // element type matches (checked above). The data is only read while the op runs.
    unsafe {
        Some(Attention {
            shape,
            params,
            q: view::<f32>(query)?,
            k: cache(key)?,
            v: cache(value)?,
            mask: match mask {
                Some(m) => Some(view::<u16>(m)?),
                None => None,
            },
            sinks: match sinks {
                Some(s) => Some(view::<f32>(s)?.data),
                None => None,
            },
        })
    }
}

/// The KV cache types wick's attention kernel reads: every type llama.cpp offers for its
/// cache.
const CACHE_TYPES: [sys::ggml_type; 9] = [
    sys::GGML_TYPE_F16,
    sys::GGML_TYPE_BF16,
    sys::GGML_TYPE_F32,
    sys::GGML_TYPE_Q8_0,
    sys::GGML_TYPE_Q4_0,
    sys::GGML_TYPE_Q4_1,
    sys::GGML_TYPE_Q5_0,
    sys::GGML_TYPE_Q5_1,
    sys::GGML_TYPE_IQ4_NL,
];

/// A KV cache tensor (of [`CACHE_TYPES`], as [`attention_of`] checked) as the attention
/// kernel reads it, when its rows are whole blocks.
///
/// # Safety
///
/// As [`view`]'s.
unsafe fn cache(t: &sys::ggml_tensor) -> Option<wick_kernels::attention::Cache<'_>> {
    use wick_kernels::attention::Cache;
    let rows = usize::try_from(t.ne[0]).ok()?;
    // SAFETY: the caller's contract.
    let cache = unsafe {
        match t.type_ {
            sys::GGML_TYPE_F16 => Cache::F16(view::<u16>(t)?),
            sys::GGML_TYPE_BF16 => Cache::BF16(view::<u16>(t)?),
            sys::GGML_TYPE_F32 => Cache::F32(view::<f32>(t)?),
            sys::GGML_TYPE_Q8_0 => Cache::Q8_0(block_view(t, Cache::Q8_0_BYTES)?),
            sys::GGML_TYPE_Q4_0 => Cache::Q4_0(block_view(t, Cache::Q4_0_BYTES)?),
            sys::GGML_TYPE_Q4_1 => Cache::Q4_1(block_view(t, Cache::Q4_1_BYTES)?),
            sys::GGML_TYPE_Q5_0 => Cache::Q5_0(block_view(t, Cache::Q5_0_BYTES)?),
            sys::GGML_TYPE_Q5_1 => Cache::Q5_1(block_view(t, Cache::Q5_1_BYTES)?),
            sys::GGML_TYPE_IQ4_NL => Cache::IQ4NL(block_view(t, Cache::IQ4_NL_BYTES)?),
            _ => return None,
        }
    };
    cache.holds(rows).then_some(cache)
}

/// A tensor of 32-value blocks of `bytes` bytes each as a byte view (strides in bytes), when
/// its blocks are contiguous along dimension 0.
///
/// # Safety
///
/// `t`'s data is allocated and holds such blocks, and is not written while the view lives.
unsafe fn block_view(
    t: &sys::ggml_tensor,
    bytes: usize,
) -> Option<wick_kernels::attention::View<'_, u8>> {
    let values = wick_kernels::attention::Cache::BLOCK_VALUES;
    let ne0 = usize::try_from(t.ne[0]).ok()?;
    if t.data.is_null() || t.nb[0] != bytes || ne0 == 0 || !ne0.is_multiple_of(values) {
        return None;
    }
    // The last block's first byte, then its bytes.
    let mut last = (ne0 / values - 1) * bytes;
    for i in 1..4 {
        let ne = usize::try_from(t.ne[i]).ok()?;
        if ne == 0 {
            return None;
        }
        last += (ne - 1) * t.nb[i];
    }
    // SAFETY: the caller's contract; the slice ends with the tensor's last block.
    let data = unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), last + bytes) };
    Some(wick_kernels::attention::View {
        data,
        stride: [t.nb[1], t.nb[2], t.nb[3]],
    })
}

/// A tensor's elements as a [`wick_kernels::attention::View`], when dimension 0 is contiguous and the
/// strides are whole elements.
///
/// # Safety
///
/// `t`'s data is allocated and holds elements of `T`, and is not written while the view lives.
unsafe fn view<T>(t: &sys::ggml_tensor) -> Option<wick_kernels::attention::View<'_, T>> {
    let size = std::mem::size_of::<T>();
    if t.data.is_null() || t.nb[0] != size || t.nb[1..].iter().any(|&b| b % size != 0) {
        return None;
    }
    let mut last = 0usize;
    for i in 0..4 {
        let ne = usize::try_from(t.ne[i]).ok()?;
        if ne == 0 {
            return None;
        }
        last += (ne - 1) * t.nb[i];
    }
    let len = last / size + 1;
    // SAFETY: the caller's contract; `len` elements reach exactly the tensor's last element.
    let data = unsafe { std::slice::from_raw_parts(t.data.cast::<T>(), len) };
    Some(wick_kernels::attention::View {
        data,
        stride: [t.nb[1] / size, t.nb[2] / size, t.nb[3] / size],
    })
}

/// Replaces the CPU device's `init_backend` with [`init_backend_hook`], once per process, after
/// checking that the device table is laid out as [`DeviceIfaceHead`] says. Returns whether the
/// hook is in place.
fn install_kernel_switch() -> bool {
    *INSTALLED.get_or_init(|| {
        // SAFETY: the registry calls take no arguments we own and return ggml's static CPU
        // device (or null, checked).
        let dev = unsafe { sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU) };
        if dev.is_null() {
            return false;
        }
        let head = dev.cast::<DeviceIfaceHead>();
        // SAFETY: a `ggml_backend_device` begins with its `ggml_backend_device_i` table by
        // value, whose first six members are the function pointers of `DeviceIfaceHead`
        // (same order, same C ABI). Before trusting that layout, two members are checked
        // against ggml's public accessors, which read the same table: `get_name` must
        // return the very pointer `ggml_backend_dev_name` returns and `get_type` must say
        // CPU. Only then is `init_backend` read and replaced; the CPU device is a mutable
        // static of ggml's that lives for the process, and the write happens once
        // (`OnceLock`), before this process creates a context with reference kernels.
        unsafe {
            let table = &mut *head;
            let (Some(get_name), Some(get_type), Some(init)) =
                (table.get_name, table.get_type, table.init_backend)
            else {
                return false;
            };
            let same_name = get_name(dev) == sys::ggml_backend_dev_name(dev);
            let is_cpu = get_type(dev) == sys::GGML_BACKEND_DEVICE_TYPE_CPU
                && sys::ggml_backend_dev_type(dev) == sys::GGML_BACKEND_DEVICE_TYPE_CPU;
            if !same_name || !is_cpu {
                tracing::warn!(
                    "ggml's CPU device table is not laid out as expected: \
                         deterministic kernels are off"
                );
                return false;
            }
            // The original is saved before the table points at the hook, so the hook always
            // finds it.
            let _ = ORIGINAL_INIT.set(init);
            table.init_backend = Some(init_backend_hook);
            true
        }
    })
}

/// A ggml device llama.cpp can offload layers to (an RPC worker's or a local GPU).
#[derive(Debug, Clone)]
pub(crate) struct Device {
    /// Its index in ggml's device list (what `LlamaModelParams::with_devices` takes).
    pub(crate) index: usize,
    /// ggml's name for it (`RPC0`, `CUDA0`, …).
    pub(crate) name: String,
    /// ggml's description (for an RPC device, its worker's `HOST:PORT`).
    pub(crate) description: String,
    /// Its free memory in bytes, as llama.cpp weighs it when splitting layers.
    pub(crate) free: usize,
    /// Its memory in bytes.
    pub(crate) total: usize,
    /// `cpu`, `gpu`, `igpu` (integrated) or `accel`.
    pub(crate) kind: &'static str,
}

/// `ggml_backend_rpc_add_server` (`ggml/include/ggml-rpc.h` of the vendored llama.cpp).
type RpcAddServer = unsafe extern "C" fn(*const std::ffi::c_char) -> sys::ggml_backend_reg_t;

/// `ggml_backend_rpc_start_server` (`ggml/include/ggml-rpc.h` of the vendored llama.cpp).
type RpcStartServer = unsafe extern "C" fn(
    *const std::ffi::c_char,
    *const std::ffi::c_char,
    usize,
    usize,
    *mut sys::ggml_backend_dev_t,
);

/// The RPC registry's function `name`, or `None` when this build has no RPC backend.
fn rpc_proc(name: &std::ffi::CStr) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    // SAFETY: both calls take static NUL-terminated names and only read ggml's registry (built
    // on first use, process-wide); a missing backend or function is a null return, checked.
    unsafe {
        let reg = sys::ggml_backend_reg_by_name(c"RPC".as_ptr());
        if reg.is_null() {
            return None;
        }
        std::ptr::NonNull::new(sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr()))
    }
}

/// Whether this build has llama.cpp's RPC backend (`GGML_RPC=ON`).
pub(crate) fn rpc_available() -> bool {
    rpc_proc(c"ggml_backend_rpc_add_server").is_some()
}

/// Endpoints whose devices are registered with ggml already: ggml's registry is process-wide
/// and has no removal, so each worker is registered once per process.
static RPC_REGISTERED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Registers the devices of the RPC worker at `endpoint` (`HOST:PORT`) with ggml (once per
/// process) and returns them.
///
/// ggml aborts the process when it cannot connect or the handshake fails, so the caller must
/// have checked the worker first (`crate::rpc::probe`).
pub(crate) fn rpc_add_server(endpoint: &str) -> Result<Vec<Device>, String> {
    let add = rpc_proc(c"ggml_backend_rpc_add_server")
        .ok_or("this wick was built without llama.cpp's RPC backend (GGML_RPC=ON)")?;
    let c_endpoint = std::ffi::CString::new(endpoint).map_err(|_| "a NUL in the address")?;
    let mut registered = RPC_REGISTERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: the pointer is the RPC registry's `ggml_backend_rpc_add_server`, whose C
    // signature `RpcAddServer` repeats (ggml-rpc.h of the pinned llama.cpp); the endpoint is a
    // live NUL-terminated string it copies. It returns the worker's registry (the same one for
    // an endpoint seen before) or null when the worker has no device.
    let reg = unsafe {
        let add: RpcAddServer = std::mem::transmute(add.as_ptr());
        add(c_endpoint.as_ptr())
    };
    if reg.is_null() {
        return Err(format!("the RPC worker at {endpoint} has no device"));
    }
    if !registered.iter().any(|e| e == endpoint) {
        // SAFETY: `reg` is a registry ggml just made (never freed); registering it adds its
        // devices to ggml's process-wide list, done once per endpoint (the lock above).
        unsafe { sys::ggml_backend_register(reg) };
        registered.push(endpoint.to_owned());
    }
    // SAFETY: `reg` is live (ggml keeps registries for the process) and indices are below its
    // device count.
    let devices: Vec<sys::ggml_backend_dev_t> = unsafe {
        (0..sys::ggml_backend_reg_dev_count(reg))
            .map(|i| sys::ggml_backend_reg_dev_get(reg, i))
            .collect()
    };
    Ok(devices_where(|dev| devices.contains(&dev)))
}

/// Whether this process registered any RPC worker's devices with ggml.
pub(crate) fn rpc_registered() -> bool {
    !RPC_REGISTERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .is_empty()
}

/// Every device ggml knows (the CPU, local GPUs, registered RPC workers), in ggml's order.
pub(crate) fn all_devices() -> Vec<Device> {
    devices_where(|_| true)
}

/// The local GPU devices (not RPC), in ggml's order.
pub(crate) fn local_gpus() -> Vec<Device> {
    devices_where(|dev| {
        // SAFETY: `dev` comes from ggml's device list, which lives for the process, as do its
        // registry and the registry's name.
        let (kind, reg_name) = unsafe {
            (
                sys::ggml_backend_dev_type(dev),
                c_text(sys::ggml_backend_reg_name(
                    sys::ggml_backend_dev_backend_reg(dev),
                )),
            )
        };
        kind == sys::GGML_BACKEND_DEVICE_TYPE_GPU && reg_name != "RPC"
    })
}

/// The devices ggml knows that `keep` keeps, in ggml's order. Only those are asked for their
/// free memory (an RPC device asks its worker over the network).
fn devices_where(keep: impl Fn(sys::ggml_backend_dev_t) -> bool) -> Vec<Device> {
    // SAFETY: indices are below `ggml_backend_dev_count`; the devices and their strings live
    // for the process; `ggml_backend_dev_memory` writes the two `usize`s it is given (for an
    // RPC device it asks the worker, which `rpc::connect` greeted just before registering it).
    unsafe {
        (0..sys::ggml_backend_dev_count())
            .map(|index| (index, sys::ggml_backend_dev_get(index)))
            .filter(|&(_, dev)| keep(dev))
            .map(|(index, dev)| {
                let (mut free, mut total) = (0usize, 0usize);
                sys::ggml_backend_dev_memory(dev, &raw mut free, &raw mut total);
                let kind = match sys::ggml_backend_dev_type(dev) {
                    sys::GGML_BACKEND_DEVICE_TYPE_CPU => "cpu",
                    sys::GGML_BACKEND_DEVICE_TYPE_GPU => "gpu",
                    sys::GGML_BACKEND_DEVICE_TYPE_IGPU => "igpu",
                    _ => "accel",
                };
                Device {
                    index,
                    name: c_text(sys::ggml_backend_dev_name(dev)),
                    description: c_text(sys::ggml_backend_dev_description(dev)),
                    free,
                    total,
                    kind,
                }
            })
            .collect()
    }
}

/// The CPU device's description (the processor's name).
pub(crate) fn cpu_description() -> String {
    // SAFETY: ggml's static CPU device (or null, checked) and its static description.
    unsafe {
        let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        if dev.is_null() {
            return String::from("CPU");
        }
        c_text(sys::ggml_backend_dev_description(dev))
    }
}

/// A C string ggml owns, as text (`""` for null).
///
/// # Safety
///
/// `p` is null or points to a NUL-terminated string that lives for the call.
unsafe fn c_text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Runs llama.cpp's RPC server on `endpoint` (`HOST:PORT`) for this machine's devices (its
/// GPUs, else its CPU) with `n_threads` CPU threads, its CPU backend on ggml's reference
/// kernels when `use_ref`. It serves one client at a time and never returns unless it could
/// not start (the port taken, a device that would not initialise): ggml printed why.
pub(crate) fn rpc_start_server(endpoint: &str, n_threads: usize, use_ref: bool) -> String {
    let Some(start) = rpc_proc(c"ggml_backend_rpc_start_server") else {
        return "this wick was built without llama.cpp's RPC backend (GGML_RPC=ON)".into();
    };
    let Ok(c_endpoint) = std::ffi::CString::new(endpoint) else {
        return "a NUL in the address".into();
    };
    let mut devices: Vec<sys::ggml_backend_dev_t> = local_gpus()
        .iter()
        // SAFETY: indices from ggml's own list, below its count.
        .map(|d| unsafe { sys::ggml_backend_dev_get(d.index) })
        .collect();
    if devices.is_empty() {
        // SAFETY: ggml's static CPU device, or null (checked).
        let cpu = unsafe { sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU) };
        if cpu.is_null() {
            return "ggml has no CPU device".into();
        }
        devices.push(cpu);
    }
    with_cpu_kernels(use_ref, || {
        // SAFETY: the pointer is the RPC registry's `ggml_backend_rpc_start_server`, whose C
        // signature `RpcStartServer` repeats (ggml-rpc.h of the pinned llama.cpp). The endpoint
        // is a live NUL-terminated string, the cache dir null (no tensor cache), and `devices`
        // holds `devices.len()` live ggml devices; all outlive the call, which blocks for as
        // long as the server runs. Its backends are created on this thread, so the reference-
        // kernel switch applies to its CPU backend.
        unsafe {
            let start: RpcStartServer = std::mem::transmute(start.as_ptr());
            start(
                c_endpoint.as_ptr(),
                std::ptr::null(),
                n_threads,
                devices.len(),
                devices.as_mut_ptr(),
            );
        }
    });
    format!("llama.cpp's RPC server on {endpoint} stopped (its reason is printed above)")
}

/// How [`GgmlProduct`] runs ggml's CPU matrix product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlKernels {
    /// What llama.cpp runs by default on a CPU: the weights repacked where ggml repacks their
    /// type for a model (`CPU_REPACK`: interleaved rows for its tiled GEMV and GEMM), and
    /// llamafile's tiled `sgemm` for batches of the other types.
    Fast,
    /// ggml's reference kernels (`use_ref`, what wick's deterministic mode leaves ggml with):
    /// plain weights and the per-pair `vec_dot` product.
    Reference,
}

/// ggml's own CPU matrix product of one weight matrix with F32 inputs (a one-node graph on a
/// CPU backend of its own, untouched by wick's hooks): llama.cpp's side of the kernel
/// benchmarks (`benches/kernels.rs`) and of the tests that hold wick's kernels near ggml's
/// results. The weights and inputs are copied into ggml's buffers when it is made.
pub struct GgmlProduct {
    weights_ctx: *mut sys::ggml_context,
    ctx: *mut sys::ggml_context,
    buffers: Vec<sys::ggml_backend_buffer_t>,
    backend: sys::ggml_backend_t,
    graph: *mut sys::ggml_cgraph,
    out: *mut sys::ggml_tensor,
    repacked: bool,
    len: usize,
}

/// The ggml type of a kernel format.
fn ggml_type_of(format: wick_kernels::matmul::Format) -> sys::ggml_type {
    (0..sys::GGML_TYPE_COUNT)
        .find(|&t| kernel_format(t) == Some(format))
        .expect("every kernel format is a ggml type")
}

impl std::fmt::Debug for GgmlProduct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgmlProduct")
            .field("repacked", &self.repacked)
            .field("outputs", &self.len)
            .finish_non_exhaustive()
    }
}

impl GgmlProduct {
    /// The product of `n` weight rows of `k` values in `format` (`weights`: the rows one after
    /// another, in ggml's block layout) with the input rows `inputs` (`k` values each), on
    /// `threads` threads of ggml's CPU backend.
    ///
    /// # Errors
    ///
    /// Sizes that do not match, or ggml refusing to allocate or to run the product.
    pub fn new(
        format: wick_kernels::matmul::Format,
        (k, n): (usize, usize),
        weights: &[u8],
        inputs: &[f32],
        kernels: GgmlKernels,
        threads: usize,
    ) -> Result<Self, String> {
        let ty = ggml_type_of(format);
        let dim = |v: usize| i64::try_from(v).map_err(|_| format!("{v} is too large"));
        // SAFETY: a pure function of a valid type and a count.
        let row = unsafe { sys::ggml_row_size(ty, dim(k)?) };
        if k == 0 || n == 0 || weights.len() != n * row {
            return Err(format!(
                "{n} rows of {k} {} values take {} bytes, not {}",
                format.name(),
                n * row,
                weights.len()
            ));
        }
        if inputs.is_empty() || !inputs.len().is_multiple_of(k) {
            return Err(format!("{} inputs are not rows of {k}", inputs.len()));
        }
        let rows = inputs.len() / k;
        let mut product = Self {
            weights_ctx: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
            buffers: Vec::new(),
            backend: std::ptr::null_mut(),
            graph: std::ptr::null_mut(),
            out: std::ptr::null_mut(),
            repacked: false,
            len: rows * n,
        };
        // SAFETY: each call gets live objects made just before it (each null checked where
        // ggml may return null); the tensors' metadata lives in the two contexts (sized for
        // their tensors and the graph, `no_alloc`), their data in the buffers allocated for
        // exactly those contexts, and the copies in and out span the tensors' byte sizes,
        // which equal the slices' (checked above: `n · row` weight bytes, `rows · k` inputs).
        // Everything is owned by `product`, whose `Drop` frees it once (also on the error
        // returns below).
        unsafe {
            let context = |tensors: usize, graph: bool| {
                sys::ggml_init(sys::ggml_init_params {
                    mem_size: tensors * sys::ggml_tensor_overhead()
                        + if graph { sys::ggml_graph_overhead() } else { 0 },
                    mem_buffer: std::ptr::null_mut(),
                    no_alloc: true,
                })
            };
            product.weights_ctx = context(1, false);
            product.ctx = context(2, true);
            if product.weights_ctx.is_null() || product.ctx.is_null() {
                return Err("ggml could not make a context".into());
            }
            let w = sys::ggml_new_tensor_2d(product.weights_ctx, ty, dim(k)?, dim(n)?);
            let x = sys::ggml_new_tensor_2d(product.ctx, sys::GGML_TYPE_F32, dim(k)?, dim(rows)?);
            product.out = sys::ggml_mul_mat(product.ctx, w, x);
            product.graph = sys::ggml_new_graph(product.ctx);
            sys::ggml_build_forward_expand(product.graph, product.out);
            let cpu = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
            if cpu.is_null() {
                return Err("ggml has no CPU device".into());
            }
            let plain = sys::ggml_backend_cpu_buffer_type();
            let mut weights_buft = plain;
            if kernels == GgmlKernels::Fast {
                if let Some(buft) = repack_buffer_type(cpu, w, product.out) {
                    weights_buft = buft;
                    product.repacked = true;
                }
            }
            for (ctx, buft) in [(product.weights_ctx, weights_buft), (product.ctx, plain)] {
                let buffer = sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
                if buffer.is_null() {
                    return Err("ggml could not allocate the product's tensors".into());
                }
                product.buffers.push(buffer);
            }
            sys::ggml_backend_tensor_set(w, weights.as_ptr().cast(), 0, weights.len());
            sys::ggml_backend_tensor_set(x, inputs.as_ptr().cast(), 0, 4 * inputs.len());
            product.backend = sys::ggml_backend_cpu_init();
            if product.backend.is_null() {
                return Err("ggml could not start a CPU backend".into());
            }
            sys::ggml_backend_cpu_set_n_threads(
                product.backend,
                std::ffi::c_int::try_from(threads.max(1)).unwrap_or(1),
            );
            if kernels == GgmlKernels::Reference {
                sys::ggml_backend_cpu_set_use_ref(product.backend, true);
            }
        }
        Ok(product)
    }

    /// Whether ggml repacked the weights (its interleaved layouts and kernels run).
    pub fn repacked(&self) -> bool {
        self.repacked
    }

    /// Computes the product.
    ///
    /// # Errors
    ///
    /// ggml's failure status.
    pub fn run(&mut self) -> Result<(), String> {
        // SAFETY: the backend and the graph were made for each other in `new` and live as long
        // as `self`; `&mut self` keeps two computations of the same graph apart.
        let status = unsafe { sys::ggml_backend_graph_compute(self.backend, self.graph) };
        if status == sys::GGML_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(format!("ggml's product failed (status {status})"))
        }
    }

    /// The last [`GgmlProduct::run`]'s result: per input row, one value per weight row.
    pub fn output(&self) -> Vec<f32> {
        let mut out = vec![0.0f32; self.len];
        // SAFETY: the output tensor holds `len` F32 values (input rows × weight rows) in its
        // allocated buffer; `out` has room for exactly those bytes.
        unsafe {
            sys::ggml_backend_tensor_get(self.out, out.as_mut_ptr().cast(), 0, 4 * self.len);
        }
        out
    }
}

/// `values` (rows of `k`) quantized to `format` by ggml's own quantizer, as llama-quantize
/// writes a model's weights (no importance matrix): real weight blocks for the benchmarks and
/// tests of wick's kernels.
///
/// # Panics
///
/// When `values` is not whole rows of `k`, or `k` is not whole blocks of `format`.
pub fn ggml_quantize(format: wick_kernels::matmul::Format, values: &[f32], k: usize) -> Vec<u8> {
    assert!(
        k > 0 && values.len().is_multiple_of(k) && k.is_multiple_of(format.block_values()),
        "{} values are not rows of {k} in whole {} blocks",
        values.len(),
        format.name()
    );
    let ty = ggml_type_of(format);
    let (rows, k) = (values.len() / k, i64::try_from(k).expect("a row length"));
    // SAFETY: pure functions of a valid type and a count.
    let row = unsafe {
        sys::ggml_quantize_init(ty);
        sys::ggml_row_size(ty, k)
    };
    let mut out = vec![0u8; rows * row];
    // SAFETY: `values` holds `rows` rows of `k` F32 values and `out` `rows` rows of `row`
    // bytes, ggml's size for `k` values of the type; no importance matrix (none of the kernel
    // formats needs one), and the type's tables were set up by `ggml_quantize_init` above.
    let written = unsafe {
        sys::ggml_quantize_chunk(
            ty,
            values.as_ptr(),
            out.as_mut_ptr().cast(),
            0,
            i64::try_from(rows).expect("a row count"),
            k,
            std::ptr::null(),
        )
    };
    assert_eq!(written, out.len(), "ggml wrote the rows it was asked for");
    out
}

/// The first of the CPU's extra buffer types (`CPU_REPACK`, …) that takes `w` for the product
/// `op`, as llama.cpp chooses one for a model's weight.
///
/// # Safety
///
/// `cpu` is ggml's CPU device; `w` is `op`'s weight tensor, not allocated yet.
unsafe fn repack_buffer_type(
    cpu: sys::ggml_backend_dev_t,
    w: *mut sys::ggml_tensor,
    op: *mut sys::ggml_tensor,
) -> Option<sys::ggml_backend_buffer_type_t> {
    // SAFETY: the caller's contract; the registry's function for this name has the C signature
    // `ggml_backend_dev_get_extra_bufts_t` and returns a null-terminated array of static
    // buffer types. As llama.cpp does to ask, the weight is given an empty buffer of each type
    // while the device is asked whether it runs `op`, and is left without one after.
    unsafe {
        let reg = sys::ggml_backend_dev_backend_reg(cpu);
        let name = c"ggml_backend_dev_get_extra_bufts";
        let proc = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
        if proc.is_null() {
            return None;
        }
        let extra_bufts: unsafe extern "C" fn(
            sys::ggml_backend_dev_t,
        ) -> *mut sys::ggml_backend_buffer_type_t = std::mem::transmute(proc);
        let mut at = extra_bufts(cpu);
        while !at.is_null() && !(*at).is_null() {
            let buft = *at;
            // Not ggml's AMX kernels, as in wick's fast mode (`with_plain_weights`).
            if is_amx(buft) {
                at = at.add(1);
                continue;
            }
            let probe = sys::ggml_backend_buft_alloc_buffer(buft, 0);
            if !probe.is_null() {
                (*w).buffer = probe;
                let supported = sys::ggml_backend_dev_supports_op(cpu, op);
                (*w).buffer = std::ptr::null_mut();
                sys::ggml_backend_buffer_free(probe);
                if supported {
                    return Some(buft);
                }
            }
            at = at.add(1);
        }
        None
    }
}

impl Drop for GgmlProduct {
    fn drop(&mut self) {
        // SAFETY: each object was made in `new` (null where it was not) and is freed once
        // here, the backend before the buffers, the buffers before their contexts.
        unsafe {
            if !self.backend.is_null() {
                sys::ggml_backend_free(self.backend);
            }
            for &buffer in &self.buffers {
                sys::ggml_backend_buffer_free(buffer);
            }
            for ctx in [self.ctx, self.weights_ctx] {
                if !ctx.is_null() {
                    sys::ggml_free(ctx);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the extra buffer types the CPU registry offers this thread now, or `None`
    /// when it offers no getter (the deterministic mode's plain weights).
    fn offered() -> Option<Vec<String>> {
        // SAFETY: ggml's static CPU device and registry (llama.cpp initialised first); the
        // function for this name has `ExtraBufts`'s signature and returns a static,
        // null-terminated array of live buffer types, each named by a static C string.
        unsafe {
            let cpu = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
            assert!(!cpu.is_null(), "a CPU device");
            let reg = sys::ggml_backend_dev_backend_reg(cpu);
            let name = c"ggml_backend_dev_get_extra_bufts";
            let getter = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
            if getter.is_null() {
                return None;
            }
            let getter = std::mem::transmute::<*mut std::ffi::c_void, ExtraBufts>(getter);
            let mut names = Vec::new();
            let mut at = getter(cpu);
            while !at.is_null() && !(*at).is_null() {
                let name = std::ffi::CStr::from_ptr(sys::ggml_backend_buft_name(*at));
                names.push(name.to_string_lossy().into_owned());
                at = at.add(1);
            }
            Some(names)
        }
    }

    /// Computes the graph `build` makes (from the input tensors it makes in the context it is
    /// given, filled with `inputs` in order) on a reference CPU backend, with wick's hook when
    /// `hook`, on two threads; returns the output's floats and whether the hook turned the
    /// output's op into wick's (a custom op).
    fn computed(
        hook: bool,
        inputs: &[&[u8]],
        build: impl FnOnce(
            *mut sys::ggml_context,
        ) -> (Vec<*mut sys::ggml_tensor>, *mut sys::ggml_tensor),
    ) -> (Vec<f32>, bool) {
        crate::load::runtime().expect("llama.cpp initialises");
        // SAFETY: a context sized for the tensors and the graph (`no_alloc`), its tensors'
        // data allocated in one CPU buffer before they are set and read, each copy spanning
        // its tensor's bytes (asserted); the backend is new, hooked before it computes, and
        // everything is freed once at the end.
        unsafe {
            let ctx = sys::ggml_init(sys::ggml_init_params {
                mem_size: 16 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
                mem_buffer: std::ptr::null_mut(),
                no_alloc: true,
            });
            assert!(!ctx.is_null());
            let (tensors, out) = build(ctx);
            let graph = sys::ggml_new_graph(ctx);
            sys::ggml_build_forward_expand(graph, out);
            let buffer = sys::ggml_backend_alloc_ctx_tensors_from_buft(
                ctx,
                sys::ggml_backend_cpu_buffer_type(),
            );
            assert!(!buffer.is_null());
            for (&t, bytes) in tensors.iter().zip(inputs) {
                assert_eq!(sys::ggml_nbytes(t), bytes.len());
                sys::ggml_backend_tensor_set(t, bytes.as_ptr().cast(), 0, bytes.len());
            }
            let backend = sys::ggml_backend_cpu_init();
            assert!(!backend.is_null());
            sys::ggml_backend_cpu_set_use_ref(backend, true);
            sys::ggml_backend_cpu_set_n_threads(backend, 2);
            if hook {
                install_attention(backend);
            }
            assert_eq!(
                sys::ggml_backend_graph_compute(backend, graph),
                sys::GGML_STATUS_SUCCESS
            );
            let mut values = vec![0f32; sys::ggml_nbytes(out) / 4];
            sys::ggml_backend_tensor_get(out, values.as_mut_ptr().cast(), 0, 4 * values.len());
            let converted = (*out).op == sys::GGML_OP_CUSTOM;
            sys::ggml_backend_free(backend);
            sys::ggml_backend_buffer_free(buffer);
            sys::ggml_free(ctx);
            (values, converted)
        }
    }

    /// Rows like a model's activations, with a few large values.
    fn activations(n: usize, seed: u64) -> Vec<f32> {
        let mut draw = wick_testutil::Draw::new(seed);
        (0..n)
            .map(|i| draw.next() * 4.0 + if i % 97 == 5 { 30.0 } else { 0.0 })
            .collect()
    }

    fn bits(values: &[f32]) -> Vec<u32> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    /// Values' bytes, as a tensor holds them.
    fn bytes<T: Copy>(values: &[T], of: impl Fn(T) -> [u8; 4]) -> Vec<u8> {
        values.iter().flat_map(|&v| of(v)).collect()
    }

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        bytes(values, f32::to_ne_bytes)
    }

    /// A mixture of experts' products (`MUL_MAT_ID`) run wick's kernel per expert: each
    /// (slot, token)'s output is the bits of its expert's weights times its input alone,
    /// whichever other inputs the expert's product gathered, with the inputs per slot or one
    /// per token (broadcast to every slot).
    #[test]
    fn a_mixture_of_experts_runs_wick_s_product_per_expert() {
        use wick_kernels::matmul::{Format, MatMul};
        let (k, rows, experts, slots, tokens) = (256usize, 40usize, 4usize, 2usize, 5usize);
        let dims = |v: usize| i64::try_from(v).unwrap();
        // Token t's slots: experts t % 4 and (t + 1) % 4, in either order; expert 3 unused by
        // token 0, every expert used by some token.
        let ids: Vec<i32> = (0..tokens)
            .flat_map(|t| {
                let (a, b) = (t % experts, (t + 1) % experts);
                if t % 2 == 0 {
                    [a, b]
                } else {
                    [b, a]
                }
            })
            .map(|e| i32::try_from(e).unwrap())
            .collect();
        for format in [Format::Q4_0, Format::Q4_K, Format::F16] {
            let weights = ggml_quantize(format, &activations(k * rows * experts, 9), k);
            let per_expert = weights.len() / experts;
            for x_slots in [slots, 1] {
                let x = activations(k * x_slots * tokens, 10);
                let (got, converted) = computed(
                    true,
                    &[&weights, &f32_bytes(&x), &bytes(&ids, i32::to_ne_bytes)],
                    |ctx| {
                        // SAFETY: `ctx` is the live context `computed` made for these tensors.
                        unsafe {
                            let w = sys::ggml_new_tensor_3d(
                                ctx,
                                ggml_type_of(format),
                                dims(k),
                                dims(rows),
                                dims(experts),
                            );
                            let b = sys::ggml_new_tensor_3d(
                                ctx,
                                sys::GGML_TYPE_F32,
                                dims(k),
                                dims(x_slots),
                                dims(tokens),
                            );
                            let id = sys::ggml_new_tensor_2d(
                                ctx,
                                sys::GGML_TYPE_I32,
                                dims(slots),
                                dims(tokens),
                            );
                            (vec![w, b, id], sys::ggml_mul_mat_id(ctx, w, b, id))
                        }
                    },
                );
                assert!(converted, "{}", format.name());
                for token in 0..tokens {
                    for slot in 0..slots {
                        let expert = usize::try_from(ids[token * slots + slot]).unwrap();
                        let input = &x[((slot % x_slots) + token * x_slots) * k..][..k];
                        let w = &weights[expert * per_expert..][..per_expert];
                        let mut want = vec![0f32; rows];
                        MatMul::packed(format, k, w, input).run(0, 1, &mut |_, first, v| {
                            want[first..first + v.len()].copy_from_slice(v);
                        });
                        let at = (token * slots + slot) * rows;
                        assert_eq!(
                            bits(&got[at..at + rows]),
                            bits(&want),
                            "{}, {x_slots} input slots, token {token}, slot {slot}",
                            format.name()
                        );
                    }
                }
            }
        }
    }

    /// A `MUL_MAT` of 3-D and 4-D slices (multi-head latent attention's per-head matrices)
    /// runs wick's kernel per slice: each output slice is the bits of its weight slice (one
    /// per two input slices in dimensions 2 and 3: ggml's broadcast) times its input slice
    /// alone, with the inputs contiguous or permuted (rows a slice apart, as DeepSeek 2's
    /// queries are).
    #[test]
    fn products_of_3_d_and_4_d_slices_run_wick_s_product_per_slice() {
        use wick_kernels::matmul::{Format, MatMul};
        let (k, rows, batch) = (256usize, 24usize, 5usize);
        let (w2, n2, n3) = (3usize, 6usize, 2usize);
        let dims = |v: usize| i64::try_from(v).unwrap();
        for format in [Format::Q8_0, Format::Q4_K, Format::F16, Format::F32] {
            let weights = ggml_quantize(format, &activations(k * rows * w2, 11), k);
            let per_slice = weights.len() / w2;
            let x = activations(k * batch * n2 * n3, 12);
            for permuted in [false, true] {
                let (got, converted) = computed(true, &[&weights, &f32_bytes(&x)], |ctx| {
                    // SAFETY: `ctx` is the live context `computed` made for these tensors.
                    unsafe {
                        let w = sys::ggml_new_tensor_3d(
                            ctx,
                            ggml_type_of(format),
                            dims(k),
                            dims(rows),
                            dims(w2),
                        );
                        let b = if permuted {
                            // Stored slice-major within each row group: element (i, r, s, t)
                            // at ((t · batch + r) · n2 + s) · k + i.
                            let t = sys::ggml_new_tensor_4d(
                                ctx,
                                sys::GGML_TYPE_F32,
                                dims(k),
                                dims(n2),
                                dims(batch),
                                dims(n3),
                            );
                            (t, sys::ggml_permute(ctx, t, 0, 2, 1, 3))
                        } else {
                            let t = sys::ggml_new_tensor_4d(
                                ctx,
                                sys::GGML_TYPE_F32,
                                dims(k),
                                dims(batch),
                                dims(n2),
                                dims(n3),
                            );
                            (t, t)
                        };
                        (vec![w, b.0], sys::ggml_mul_mat(ctx, w, b.1))
                    }
                });
                assert!(converted, "{}", format.name());
                for t in 0..n3 {
                    for s in 0..n2 {
                        let input: Vec<f32> = (0..batch)
                            .flat_map(|r| {
                                let at = if permuted {
                                    ((t * batch + r) * n2 + s) * k
                                } else {
                                    ((t * n2 + s) * batch + r) * k
                                };
                                x[at..at + k].to_vec()
                            })
                            .collect();
                        // Input slice s takes weight slice s / 2 (6 over 3).
                        let w = &weights[s / 2 * per_slice..][..per_slice];
                        let mut want = vec![0f32; rows * batch];
                        MatMul::packed(format, k, w, &input).run(0, 1, &mut |i, first, v| {
                            want[i * rows + first..i * rows + first + v.len()].copy_from_slice(v);
                        });
                        let at = (t * n2 + s) * batch * rows;
                        assert_eq!(
                            bits(&got[at..at + rows * batch]),
                            bits(&want),
                            "{}, permuted: {permuted}, slice ({s}, {t})",
                            format.name()
                        );
                    }
                }
            }
        }
    }

    /// A router's `SOFT_MAX` (no mask), a mixture of experts' 3-D `SWIGLU` and a `SILU`
    /// (in place or not) run wick's kernels.
    #[test]
    fn a_router_s_softmax_the_experts_swiglu_and_silu_run_wick_s_kernels() {
        let x = activations(70 * 3, 24);
        for in_place in [false, true] {
            let (got, converted) = computed(true, &[&f32_bytes(&x)], |ctx| {
                // SAFETY: `ctx` is the live context `computed` made for these tensors.
                unsafe {
                    let t = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, 70, 3);
                    let out = if in_place {
                        sys::ggml_silu_inplace(ctx, t)
                    } else {
                        sys::ggml_silu(ctx, t)
                    };
                    (vec![t], out)
                }
            });
            assert!(converted);
            let want: Vec<f32> = x
                .iter()
                .map(|&v| wick_kernels::activation::silu(v))
                .collect();
            assert_eq!(bits(&got), bits(&want), "in place: {in_place}");
        }

        let (n, rows) = (60usize, 9usize);
        let x = activations(n * rows, 21);
        let (got, converted) = computed(true, &[&f32_bytes(&x)], |ctx| {
            // SAFETY: `ctx` is the live context `computed` made for these tensors.
            unsafe {
                let t = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, 60, 9);
                (
                    vec![t],
                    sys::ggml_soft_max_ext(ctx, t, std::ptr::null_mut(), 0.5, 0.0),
                )
            }
        });
        assert!(converted);
        let mut want = x.clone();
        for row in want.chunks_exact_mut(n) {
            wick_kernels::norm::softmax(row, 0.5);
        }
        assert_eq!(bits(&got), bits(&want));

        let (width, slots, tokens) = (96usize, 2usize, 3usize);
        let (a, g) = (
            activations(width * slots * tokens, 22),
            activations(width * slots * tokens, 23),
        );
        let (got, converted) = computed(true, &[&f32_bytes(&a), &f32_bytes(&g)], |ctx| {
            // SAFETY: `ctx` is the live context `computed` made for these tensors.
            unsafe {
                let three = |ctx| sys::ggml_new_tensor_3d(ctx, sys::GGML_TYPE_F32, 96, 2, 3);
                let (a, g) = (three(ctx), three(ctx));
                (vec![a, g], sys::ggml_swiglu_split(ctx, a, g))
            }
        });
        assert!(converted);
        let mut want = vec![0f32; a.len()];
        wick_kernels::activation::swiglu(&a, &g, &mut want);
        assert_eq!(bits(&got), bits(&want));
    }

    /// ggml's `NORM`, in place or not, runs wick's layer norm in the hooked graph: the node is
    /// converted and gives the kernel's bits, and ggml's own (which sums by the build's vector
    /// width: on this test's 400 rows an AVX-512 build and an x86-64-v3 build of it differed
    /// from wick's in 9 and 11 rows, wick's were the same in both) stays within rounding of it.
    #[test]
    fn a_layer_norm_in_the_graph_runs_wick_s_kernel_in_place_or_not() {
        let (width, rows) = (2563usize, 400usize);
        let x = activations(width * rows, 3);
        let mut want = vec![0f32; x.len()];
        for (row, out) in x.chunks_exact(width).zip(want.chunks_exact_mut(width)) {
            wick_kernels::norm::layer_norm(row, 1e-5, out);
        }
        for in_place in [false, true] {
            let norm = |hook| {
                computed(hook, &[&f32_bytes(&x)], |ctx| {
                    // SAFETY: `ctx` is the live context `computed` made for these tensors.
                    unsafe {
                        let t = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, 2563, 400);
                        let out = if in_place {
                            sys::ggml_norm_inplace(ctx, t, 1e-5)
                        } else {
                            sys::ggml_norm(ctx, t, 1e-5)
                        };
                        (vec![t], out)
                    }
                })
            };
            let (got, converted) = norm(true);
            assert!(converted, "in place: {in_place}");
            assert_eq!(bits(&got), bits(&want), "in place: {in_place}");
            let (ggml, converted) = norm(false);
            assert!(!converted);
            for (a, b) in ggml.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} against {b}");
            }
        }
    }

    #[test]
    fn the_fast_mode_is_offered_every_extra_buffer_type_but_amx_and_plain_weights_none() {
        crate::load::runtime().expect("llama.cpp initialises");
        assert!(install_plain_weights(), "the registry hook installs");
        let fast = with_plain_weights(false, offered).expect("the fast mode gets a getter");
        assert!(!fast.iter().any(|n| n == "AMX"), "{fast:?}");
        // x86-64 builds repack Q4_0 and friends for their tiled kernels: still offered.
        #[cfg(target_arch = "x86_64")]
        assert!(fast.iter().any(|n| n == "CPU_REPACK"), "{fast:?}");
        assert_eq!(with_plain_weights(true, offered), None);
        // The thread's flag is put back: the fast mode again.
        assert_eq!(with_plain_weights(false, offered), Some(fast));
    }
}
