//! Who runs the pooler and who a Unix-socket peer is: the real uid, and a uid's user name
//! (getpwuid_r), for `peer` authentication and the console's own user.
#![allow(unsafe_code)]

/// The process's real uid (PgBouncer compares a socket peer's uid with `getuid()`).
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The user name of `uid` (from the password database, NSS included); `None` when it has none
/// or it is not UTF-8.
pub fn name(uid: u32) -> Option<String> {
    // SAFETY: `passwd` is plain data; all-zero is a valid (empty) value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and `buf`'s length is passed with it.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`, alive here.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    name.to_str().ok().map(String::from)
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_is_uid_0() {
        assert_eq!(super::name(0).as_deref(), Some("root"));
        assert_eq!(super::name(4_000_000_000), None);
        assert!(super::name(super::uid()).is_some());
    }
}
