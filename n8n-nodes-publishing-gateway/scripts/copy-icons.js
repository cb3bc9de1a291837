// Copies the icons next to the compiled nodes and credentials (n8n resolves `file:` icons
// relative to the compiled .js file).
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
fs.mkdirSync(path.join(root, 'dist', 'icons'), { recursive: true });
for (const name of fs.readdirSync(path.join(root, 'icons'))) {
	fs.copyFileSync(path.join(root, 'icons', name), path.join(root, 'dist', 'icons', name));
}
