//! Ports for servers a test starts.

/// A loopback address whose port was free a moment ago, for a server the test starts.
pub(crate) fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .to_string()
}
