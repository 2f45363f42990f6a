// The release archive's stand-in for sharp (scripts/release.ts): transformers.js imports sharp for
// images, which tserve does not serve, and sharp would bring a native libvips of some 20 MB. It must
// be there, since transformers.js refuses to load without an image library; it fails if ever used.
export default function sharp() {
  throw new Error('images are not supported by this build of tserve');
}
