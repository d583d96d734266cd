//! The simplest end-to-end path: a real server, pgcorral in-process, one query.

mod support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_through_pooler() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "")).await;
    let client = pooler.connect("postgres", None, "postgres").await;
    let row = client.query_one("SELECT 40 + 2", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
}
