'use strict';
// The addon built by `node build.mjs` (the Rust crate in src/, napi-rs);
// index.d.ts declares its types.
module.exports = require('./failover.node');
