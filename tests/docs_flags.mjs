// docs_flags: every `forum ...` command line in README.md and docs/*.md
// names a command, subcommand and flags that exist. The flags each command
// takes come from the binary itself (`forum docs completion bash`, which
// lists each command's option table), so a flag renamed or dropped in the
// code fails here until the docs say the same.
// Usage: node tests/docs_flags.mjs FORUM_BIN
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const bin = process.argv[2];
if (!bin) {
  console.error('usage: node tests/docs_flags.mjs FORUM_BIN');
  process.exit(2);
}
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const comp = execFileSync(bin, ['docs', 'completion', 'bash'], { encoding: 'utf8' });

// "ledger show") w="--limit" ;;   and   "verify "*) w="..." ;;
const arms = new Map();
for (const m of comp.matchAll(/^\s+"([^"]*)"(\*?)\) w="([^"]*)" ;;$/gm))
  arms.set(m[1] + m[2], new Set(m[3].split(/\s+/).filter(Boolean)));
// ledger) COMPREPLY=($(compgen -W "init append ..." -- "$cur")) ;;
const subs = new Map();
let top = [];
for (const m of comp.matchAll(/^\s+(\S*)\) COMPREPLY=\(\$\(compgen -W "([^"]*)"/gm)) {
  const words = m[2].split(/\s+/).filter((w) => !w.startsWith('-'));
  if (m[1] === '""') top = words;
  else subs.set(m[1], new Set(words));
}
if (top.length < 10 || arms.size < 20) {
  console.error(`docs_flags: could not read the completion script (${top.length} commands, ${arms.size} arms)`);
  process.exit(1);
}

const global = new Set(['--ledger', '--json', '--help', '-h']);
const files = ['README.md', ...readdirSync(join(root, 'docs'))
  .filter((f) => f.endsWith('.md')).map((f) => join('docs', f))];
let lines = 0;
const bad = [];
for (const f of files) {
  const text = readFileSync(join(root, f), 'utf8').split('\n');
  let fence = false;
  text.forEach((line, i) => {
    if (/^\s*```/.test(line)) fence = !fence;
    // each "forum WORDS" up to a shell operator, backtick or quote end
    for (const m of line.matchAll(/(?:^|[\s`$(])forum((?: +[^\s`|;&)><"']+)+)/g)) {
      const toks = m[1].trim().split(/\s+/);
      let k = 0;
      while (k < toks.length && (toks[k] === '--json' || toks[k] === '--ledger'))
        k += toks[k] === '--ledger' ? 2 : 1;
      const cmd = toks[k++];
      if (!top.includes(cmd)) continue; // prose: "forum keeps ..."
      lines++;
      let sub = '';
      // in code (a fenced block, or `forum ...`), a word after a command
      // with subcommands must be one of them; prose may say "a forum run is"
      const code = fence || m[0].startsWith('`');
      if (subs.has(cmd) && subs.get(cmd).has(toks[k])) sub = toks[k++];
      else if (code && subs.has(cmd) && toks[k] && /^[a-z][a-z-]*$/.test(toks[k]))
        bad.push(`${f}:${i + 1}: forum ${cmd}: no subcommand ${toks[k]}: ${line.trim()}`);
      const allowed = (sub && arms.get(`${cmd} ${sub}`)) ||
        arms.get(`${cmd} *`) || new Set();
      for (const t of toks.slice(k)) {
        if (!/^--?[a-zA-Z]/.test(t)) continue;
        const flag = t.split('=')[0];
        if (!allowed.has(flag) && !global.has(flag))
          bad.push(`${f}:${i + 1}: forum ${cmd}${sub ? ' ' + sub : ''}: no option ${flag}: ${line.trim()}`);
      }
    }
  });
}
for (const b of bad) console.error(b);
console.log(`docs_flags: ${lines} command lines in ${files.length} files, ${bad.length} unknown options`);
process.exit(bad.length ? 1 : 0);
