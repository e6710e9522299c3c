//! The runtime interface: what the driver needs from an async runtime.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

pub use porous_udp::{AsSocketRef, SocketRef};

/// An async runtime, as the driver sees it: a way to spawn the driver task, a timer, and
/// a UDP socket that reports readiness. Implemented by `porous-tokio`, `porous-smol` and
/// `porous-async-std`; implement it to run POROUS on another runtime or on your own
/// executor, and pass it to [`Host::bind_with`](crate::Host::bind_with).
pub trait Runtime: fmt::Debug {
    /// Runs `driver` in the background until it completes (it completes once every handle
    /// of its host is gone). Called once per host, from [`Host::bind_with`](crate::Host::bind_with).
    fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send>>);

    /// A timer that fires at `deadline`.
    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>>;

    /// Registers a bound, non-blocking socket with the runtime's reactor.
    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Box<dyn AsyncUdpSocket>>;
}

/// A resettable timer.
pub trait AsyncTimer: Send + fmt::Debug {
    /// Makes the timer fire at `deadline` instead.
    fn reset(self: Pin<&mut Self>, deadline: Instant);

    /// `Ready` once the deadline has passed; otherwise registers `cx`'s waker. What later
    /// polls return before the next reset does not matter.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()>;
}

/// What [`AsyncUdpSocket::poll_io`] waits for: a closed set (a socket is read or
/// written), so not `#[non_exhaustive]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Interest {
    /// The socket may have datagrams to read.
    Readable,
    /// The socket may take datagrams to send.
    Writable,
}

/// A UDP socket registered with a runtime's reactor.
pub trait AsyncUdpSocket: Send + Sync + fmt::Debug {
    /// Runs `io`, a non-blocking system call on the socket, when the socket may be ready
    /// for `interest`, and returns its result. When `io` fails with `WouldBlock`, the
    /// socket's readiness is cleared and `io` runs again once the reactor reports the
    /// socket ready; until then this returns `Pending` with `cx`'s waker registered.
    /// `io` may run before any readiness was reported (it is cheap to try).
    fn poll_io(
        &self,
        cx: &mut Context<'_>,
        interest: Interest,
        io: &mut dyn FnMut(SocketRef<'_>) -> io::Result<()>,
    ) -> Poll<io::Result<()>>;

    /// The address the socket is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// The runtime interface on the `async-io` reactor, which smol and async-std run on
/// (feature `async-io`). A runtime binding adds its own way to spawn.
#[cfg(feature = "async-io")]
pub mod async_io {
    use std::fmt;
    use std::future::Future;
    use std::io;
    use std::net::{SocketAddr, UdpSocket};
    use std::pin::Pin;
    use std::task::{Context, Poll, ready};
    use std::time::Instant;

    use porous_udp::AsSocketRef;

    use super::{AsyncTimer, AsyncUdpSocket, Interest, SocketRef};

    /// A UDP socket on the `async-io` reactor.
    #[derive(Debug)]
    pub struct AsyncIoSocket(async_io::Async<UdpSocket>);

    impl AsyncIoSocket {
        /// Registers `socket` with the reactor (and makes it non-blocking).
        pub fn new(socket: UdpSocket) -> io::Result<Self> {
            async_io::Async::new(socket).map(Self)
        }
    }

    impl AsyncUdpSocket for AsyncIoSocket {
        fn poll_io(
            &self,
            cx: &mut Context<'_>,
            interest: Interest,
            io: &mut dyn FnMut(SocketRef<'_>) -> io::Result<()>,
        ) -> Poll<io::Result<()>> {
            loop {
                // Optimistically first, as async-io's own `read_with` does: a readiness
                // poll registers interest and costs a reactor round trip.
                match io(self.0.get_ref().as_socket_ref()) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    result => return Poll::Ready(result),
                }
                match interest {
                    Interest::Readable => ready!(self.0.poll_readable(cx))?,
                    Interest::Writable => ready!(self.0.poll_writable(cx))?,
                }
            }
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            self.0.get_ref().local_addr()
        }
    }

    /// A timer on the `async-io` reactor.
    pub struct AsyncIoTimer(async_io::Timer);

    impl fmt::Debug for AsyncIoTimer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_tuple("AsyncIoTimer").finish()
        }
    }

    impl AsyncIoTimer {
        /// A timer that fires at `deadline`.
        pub fn at(deadline: Instant) -> Self {
            Self(async_io::Timer::at(deadline))
        }
    }

    impl AsyncTimer for AsyncIoTimer {
        fn reset(mut self: Pin<&mut Self>, deadline: Instant) {
            self.0.set_at(deadline);
        }

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            Pin::new(&mut self.0).poll(cx).map(drop)
        }
    }
}
