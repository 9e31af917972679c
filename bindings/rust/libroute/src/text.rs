//! Pseudo-tokens for hosts without a tokenizer (`lr_text.h`).

use crate::error::{check, Result};
use crate::{ptr_or_null, sys};

/// Cuts text into pseudo-tokens of `width` bytes (1..=64; 4 is close to a
/// real tokenizer's average on English). Equal text prefixes give equal
/// token prefixes, which is all the prefix index needs.
pub fn text_tokens(text: &[u8], width: u32) -> Result<Vec<u32>> {
    const OP: &str = "lr_text_tokens";
    let p = ptr_or_null(text).cast();
    let mut n = 0usize;
    // SAFETY: NULL output asks the size only.
    let st = unsafe { sys::lr_text_tokens(p, text.len(), width, std::ptr::null_mut(), 0, &mut n) };
    if st != sys::LR_OK && st != sys::LR_EBUFSIZE {
        check(st, OP)?;
    }
    let mut out = Vec::<u32>::with_capacity(n);
    // SAFETY: the buffer has n slots.
    check(
        unsafe { sys::lr_text_tokens(p, text.len(), width, out.as_mut_ptr(), n, &mut n) },
        OP,
    )?;
    assert!(n <= out.capacity());
    // SAFETY: the library wrote n tokens.
    unsafe { out.set_len(n) };
    Ok(out)
}
