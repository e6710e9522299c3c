//! placeholder replaced by the adapter
