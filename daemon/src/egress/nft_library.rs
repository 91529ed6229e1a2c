//! nftables' own library (`libnftables.so.1`, which the `nft` tool is a
//! thin front end of), opened at run time.
//!
//! Why opened and not linked: the daemon then builds without nftables'
//! headers, and runs where the library is missing, falling back to the
//! `nft` tool. Why it is only ever used in the helper process
//! ([`super::nft_helper`]), never in the daemon: libnftables 1.0.6 calls
//! `exit()` when it cannot open its netlink socket (descriptor or memory
//! exhaustion), which must not end the daemon.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use libloading::{Library, Symbol};

use super::nft::first_error;

/// The library's file name, as the dynamic loader finds it.
pub const FILE_NAME: &str = "libnftables.so.1";

/// `NFT_CTX_DEFAULT`: a context with the default settings.
const CTX_DEFAULT: u32 = 0;

/// The library, loaded, with the calls one load needs.
pub struct NftLibrary {
    _library: Library,
    calls: Calls,
}

/// The six calls of libnftables' public API a load uses (its `nftables.h`).
struct Calls {
    ctx_new: unsafe extern "C" fn(u32) -> *mut c_void,
    ctx_free: unsafe extern "C" fn(*mut c_void),
    buffer_output: unsafe extern "C" fn(*mut c_void) -> c_int,
    buffer_error: unsafe extern "C" fn(*mut c_void) -> c_int,
    error_buffer: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    run_from_buffer: unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int,
}

impl NftLibrary {
    /// Loads `libnftables.so.1` and finds its calls; `Err` says what is
    /// missing.
    pub fn open() -> Result<NftLibrary, String> {
        // SAFETY: loading libnftables runs its initialisers, which only set
        // up its own state; this runs in the single-threaded helper.
        let library = unsafe { Library::new(FILE_NAME) }
            .map_err(|error| format!("cannot load {FILE_NAME}: {error}"))?;
        // SAFETY: each symbol is looked up with the signature nftables.h
        // declares for it (libnftables 0.9.1 and later).
        let calls = unsafe {
            Calls {
                ctx_new: *symbol(&library, b"nft_ctx_new\0")?,
                ctx_free: *symbol(&library, b"nft_ctx_free\0")?,
                buffer_output: *symbol(&library, b"nft_ctx_buffer_output\0")?,
                buffer_error: *symbol(&library, b"nft_ctx_buffer_error\0")?,
                error_buffer: *symbol(&library, b"nft_ctx_get_error_buffer\0")?,
                run_from_buffer: *symbol(&library, b"nft_run_cmd_from_buffer\0")?,
            }
        };
        Ok(NftLibrary {
            _library: library,
            calls,
        })
    }

    /// Applies `script` (nft's own language, as `nft -f` reads it) as one
    /// transaction in the calling thread's network namespace. A context is
    /// made for each call: its netlink socket is opened in the namespace
    /// the thread is in then. `Err` is nft's own message.
    pub fn apply(&self, script: &str) -> Result<(), String> {
        let script = CString::new(script).map_err(|_| "the rules hold a NUL byte".to_string())?;
        // SAFETY: a new context, used only below and freed at the end;
        // every pointer passed is the context or a NUL-terminated string
        // that outlives the call, and the error buffer is read (copied)
        // before the context that owns it is freed.
        unsafe {
            let ctx = (self.calls.ctx_new)(CTX_DEFAULT);
            if ctx.is_null() {
                return Err("nft_ctx_new failed".to_string());
            }
            (self.calls.buffer_output)(ctx);
            (self.calls.buffer_error)(ctx);
            let status = (self.calls.run_from_buffer)(ctx, script.as_ptr());
            let answer = if status == 0 {
                Ok(())
            } else {
                let messages = error_text((self.calls.error_buffer)(ctx));
                Err(first_error(&messages).to_string())
            };
            (self.calls.ctx_free)(ctx);
            answer
        }
    }
}

/// The symbol `name` (NUL-terminated) of `library`, as a `T`.
///
/// # Safety
/// `T` must be the symbol's real type.
unsafe fn symbol<'a, T>(library: &'a Library, name: &[u8]) -> Result<Symbol<'a, T>, String> {
    // SAFETY: the caller vouches for the type.
    unsafe { library.get(name) }.map_err(|error| {
        format!(
            "{FILE_NAME} has no {}: {error}",
            String::from_utf8_lossy(&name[..name.len() - 1])
        )
    })
}

/// The error buffer's text (empty when there is none).
///
/// # Safety
/// `buffer` is null or a NUL-terminated string alive for the call.
unsafe fn error_text(buffer: *const c_char) -> String {
    if buffer.is_null() {
        return String::new();
    }
    // SAFETY: as the caller vouches.
    unsafe { CStr::from_ptr(buffer) }
        .to_string_lossy()
        .into_owned()
}
