//! What the node reads of the database server itself: its clock, and which server a
//! connection reached (a multi-host URL reaches whichever is the primary now).

/// The database's clock now (not the transaction's start: see `store::clock`).
pub const READ_CLOCK: &str = "SELECT clock_timestamp()";

/// The server this connection reached, as it names itself: `address:port` (an IPv6
/// address in brackets), or `a local socket`.
pub const DATABASE_SERVER: &str = "\
SELECT COALESCE(CASE WHEN family(inet_server_addr()) = 6
                     THEN '[' || host(inet_server_addr()) || ']'
                     ELSE host(inet_server_addr()) END
                || ':' || inet_server_port(),
                'a local socket') AS address";
