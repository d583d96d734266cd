#!/usr/bin/env node
// node-postgres' quick disconnect (its own test for issue #320): `connect()` then `end()` at
// once. The Terminate goes out where the StartupMessage belongs, and the connection is closed;
// PostgreSQL closes too without a word (an invalid startup packet length is only logged), so
// the client sees no error. Repeated `--rounds` times; then one normal query checks the port.
//
//     node pg_quick_disconnect.js --host H --port P --user U --database D [--rounds R]
//
// Prints `node-postgres quick disconnect ok: R rounds` and exits 0; or the errors, exit 1.
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
    user: arg('user', 'postgres'),
    database: arg('database', 'postgres'),
  }
  const rounds = +arg('rounds', '20')
  const errors = []
  process.on('uncaughtException', (e) => errors.push('uncaught: ' + e.message))
  for (let i = 0; i < rounds; i++) {
    const c = new pg.Client(config)
    c.on('error', (e) => errors.push('error event: ' + e.message))
    // The connect promise may never settle once ended: not awaited.
    c.connect().then(
      () => {},
      (e) => errors.push('connect rejected: ' + e.message)
    )
    await c.end().catch((e) => errors.push('end rejected: ' + e.message))
    await new Promise((r) => setTimeout(r, 50))
  }
  await new Promise((r) => setTimeout(r, 300))
  const c = new pg.Client(config)
  await c.connect()
  const r = await c.query('SELECT 1 AS one')
  await c.end()
  if (r.rows[0].one !== 1) errors.push('SELECT 1 gave ' + JSON.stringify(r.rows))
  if (errors.length) {
    console.log(errors.join('\n'))
    process.exit(1)
  }
  console.log(`node-postgres quick disconnect ok: ${rounds} rounds`)
}

main().catch((e) => {
  console.log('failed: ' + e.stack)
  process.exit(1)
})
