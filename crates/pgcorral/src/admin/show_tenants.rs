//! The console's view of the tenants this node has loaded: `SHOW TENANTS`.

use crate::rows::{Cell, Table, Ty};
use crate::services::Services;

/// One row per loaded tenant: its server, whether it is enabled, its users, and its pools'
/// clients and servers on this node.
pub fn tenants(services: &Services) -> Table {
    let mut t = Table::new(&[
        ("tenant", Ty::Text),
        ("enabled", Ty::Text),
        ("host", Ty::Text),
        ("port", Ty::Int),
        ("database", Ty::Text),
        ("replicas", Ty::Int),
        ("users", Ty::Int),
        ("pools", Ty::Int),
        ("cl_active", Ty::Int),
        ("cl_waiting", Ty::Int),
        ("sv_open", Ty::Int),
    ]);
    let Some(tenants) = services.tenants.get() else {
        return t;
    };
    for loaded in tenants.all() {
        let tenant = loaded.tenant();
        let pools = loaded.pools.all();
        let (mut clients, mut waiting, mut open) = (0, 0, 0);
        for p in &pools {
            let s = p.snapshot();
            clients += s.clients;
            waiting += s.waiting;
            open += s.open;
        }
        t.row(vec![
            loaded.id.as_str().into(),
            Cell::from(if tenant.enabled() { "yes" } else { "no" }),
            tenant.db_host.as_str().into(),
            usize::from(tenant.db_port).into(),
            tenant.db_database.as_str().into(),
            tenant.replicas.len().into(),
            tenant.users.len().into(),
            pools.len().into(),
            clients.into(),
            waiting.into(),
            open.into(),
        ]);
    }
    t
}
