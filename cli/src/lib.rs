//! vmscope CLI library.
