#!/usr/bin/env node
// LISTEN through the pooler with node-postgres' 'notification' events.
//
//     node pg_listeners.js --host H --port P [--clients N]
//
// N clients listen on channel a or b (alternately); one more sends 20 notifications on each.
// Every listener must get exactly its channel's payloads, in order. Prints
// `node-postgres listeners ok: N clients, 40 notifications` and exits 0; or the error, exit 1.
'use strict'

const pg = require('pg')

function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name)
  return i >= 0 ? process.argv[i + 1] : dflt
}

async function main() {
  const config = {
    host: arg('host', '127.0.0.1'),
    port: +arg('port', '6432'),
    user: 'postgres',
    database: 'postgres',
  }
  const clients = +arg('clients', '10')
  const listeners = []
  for (let i = 0; i < clients; i++) {
    const ch = 'ab'[i % 2]
    const c = new pg.Client(config)
    await c.connect()
    const seen = []
    c.on('notification', (n) => seen.push(n.channel + ':' + n.payload))
    await c.query('LISTEN ' + ch)
    listeners.push({ ch, c, seen })
  }
  const sender = new pg.Client(config)
  await sender.connect()
  for (let i = 0; i < 20; i++) {
    for (const ch of ['a', 'b']) {
      await sender.query(`NOTIFY ${ch}, '${ch}${i}'`)
    }
  }
  const deadline = Date.now() + 10000
  while (listeners.some((l) => l.seen.length < 20) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20))
  }
  await new Promise((r) => setTimeout(r, 200))
  for (const l of listeners) {
    const want = Array.from({ length: 20 }, (_, i) => `${l.ch}:${l.ch}${i}`)
    if (JSON.stringify(l.seen) !== JSON.stringify(want)) {
      throw new Error(`listener on ${l.ch}: ${JSON.stringify(l.seen)}`)
    }
    await l.c.end()
  }
  await sender.end()
  console.log(`node-postgres listeners ok: ${clients} clients, 40 notifications`)
}

main().catch((e) => {
  console.error(e.message)
  process.exit(1)
})
