//! Symbols of the objects loaded in this process, looked up as the dynamic linker resolves calls.

use std::ffi::{CStr, c_void};

/// The address `name` resolves to in this process (`dlsym` with `RTLD_DEFAULT`: the loaded
/// objects in the order calls are bound), or 0 where no loaded object defines it.
pub(crate) fn symbol_address(name: &CStr) -> usize {
    unsafe extern "C" {
        fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
    }
    const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();
    // SAFETY: dlsym with RTLD_DEFAULT only looks the name up; a null answer means it is absent.
    unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) as usize }
}
