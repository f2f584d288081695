// tackroom robot: the simulator's scene drawn with three.js (served locally from npm).
//
// The page draws what GET /api/scene returns: MuJoCo geoms (box, sphere, cylinder,
// capsule, plane; sizes are MuJoCo half-sizes; quaternions [w, x, y, z]; world frame,
// z up) and the camera {pos, target, fovy}. It polls GET /api/version and redraws when
// the simulator's version changes. After drawing version N it sets
// window.__tackroomRendered = N, so a screenshot can wait for the exact state;
// window.__tackroomRefresh() fetches and draws now and resolves to the version drawn.
import * as THREE from "three";

const params = new URLSearchParams(location.search);
const POLL_MS = Number(params.get("poll") || 150);
const canvas = document.getElementById("view");
const status = document.getElementById("status");
if (params.get("hud") === "1") status.classList.remove("hidden");

window.__tackroomRendered = -1;


const renderer = new THREE.WebGLRenderer({ canvas, antialias: false, preserveDrawingBuffer: true });
renderer.setPixelRatio(1);
renderer.setClearColor(0xdfe6ee, 1);

const scene = new THREE.Scene();
const camera = new THREE.PerspectiveCamera(45, 4 / 3, 0.01, 100);
camera.up.set(0, 0, 1);  // MuJoCo's world: z up

scene.add(new THREE.HemisphereLight(0xffffff, 0x8a8f99, 1.6));
const sun = new THREE.DirectionalLight(0xffffff, 1.6);
sun.position.set(1.5, -1.0, 3.0);
scene.add(sun);

// A grid on the ground and the world axes (x red, y green), for orientation.
const grid = new THREE.GridHelper(2, 20, 0x7a8494, 0xb4bcc8);
grid.rotation.x = Math.PI / 2;  // GridHelper lies in XZ; MuJoCo's ground is XY
grid.position.z = 0.0005;
scene.add(grid);
const axes = new THREE.AxesHelper(0.15);
axes.position.z = 0.001;
scene.add(axes);

const meshes = new Map();  // geom key -> mesh
let layout = "";           // the geoms' names and shapes: rebuilt when it changes
let drawn = -1;
let busy = null;

function resize() {
  const w = window.innerWidth, h = window.innerHeight;
  renderer.setSize(w, h, false);
  canvas.style.width = w + "px";
  canvas.style.height = h + "px";
  camera.aspect = w / h;
  camera.updateProjectionMatrix();
}

function geometry(g) {
  const s = g.size || [];
  switch (g.type) {
    case "box":
      return new THREE.BoxGeometry(2 * s[0], 2 * s[1], 2 * s[2]);
    case "sphere":
      return new THREE.SphereGeometry(s[0], 24, 16);
    case "cylinder": {  // MuJoCo: radius, half-length along local z; three: along y
      const c = new THREE.CylinderGeometry(s[0], s[0], 2 * s[1], 24);
      c.rotateX(Math.PI / 2);
      return c;
    }
    case "capsule": {
      const c = new THREE.CapsuleGeometry(s[0], 2 * s[1], 6, 16);
      c.rotateX(Math.PI / 2);
      return c;
    }
    case "plane": {  // half-sizes; 0 means infinite in MuJoCo
      const w = s[0] > 0 ? 2 * s[0] : 4, h = s[1] > 0 ? 2 * s[1] : 4;
      return new THREE.PlaneGeometry(w, h);
    }
    default:
      return null;
  }
}

function material(rgba) {
  const c = rgba || [0.6, 0.6, 0.6, 1];
  // MuJoCo's rgba is shown as is (sRGB), as MuJoCo's own viewer does.
  const color = new THREE.Color().setRGB(c[0], c[1], c[2], THREE.SRGBColorSpace);
  const m = new THREE.MeshLambertMaterial({ color });
  if (c[3] < 1) { m.transparent = true; m.opacity = c[3]; m.depthWrite = false; }
  return m;
}

function keyOf(g, i) { return g.name ? g.name : "#" + i; }

function build(geoms) {
  for (const m of meshes.values()) { scene.remove(m); m.geometry.dispose(); m.material.dispose(); }
  meshes.clear();
  geoms.forEach((g, i) => {
    if (g.rgba && g.rgba[3] === 0) return;  // invisible (collision-only) geoms
    const geo = geometry(g);
    if (!geo) return;
    const mesh = new THREE.Mesh(geo, material(g.rgba));
    mesh.name = keyOf(g, i);
    if (g.type === "plane") mesh.renderOrder = -1;
    meshes.set(mesh.name, mesh);
    scene.add(mesh);
  });
}

function apply(sc) {
  const geoms = sc.geoms || [];
  const shape = JSON.stringify(geoms.map((g, i) => [keyOf(g, i), g.type, g.size, g.rgba]));
  if (shape !== layout) { build(geoms); layout = shape; }
  geoms.forEach((g, i) => {
    const m = meshes.get(keyOf(g, i));
    if (!m) return;
    m.position.set(g.pos[0], g.pos[1], g.pos[2]);
    const q = g.quat || [1, 0, 0, 0];  // MuJoCo [w, x, y, z]
    m.quaternion.set(q[1], q[2], q[3], q[0]);
  });
  const cam = sc.camera || {};
  const p = cam.pos || [1.2, -1.2, 1.0], t = cam.target || [0, 0, 0];
  camera.fov = cam.fovy || 45;
  camera.position.set(p[0], p[1], p[2]);
  camera.lookAt(t[0], t[1], t[2]);
  camera.updateProjectionMatrix();
  renderer.render(scene, camera);
  drawn = sc.version;
  window.__tackroomRendered = sc.version;
  status.textContent = "version " + sc.version + " · " + meshes.size + " geoms";
}

async function refresh() {
  // One fetch-and-draw at a time; a caller during one waits for it, then draws again.
  while (busy) await busy;
  busy = (async () => {
    try {
      const r = await fetch("/api/scene", { cache: "no-store" });
      if (!r.ok) {
        let why = "";
        try { why = ": " + (await r.json()).error; } catch (e) { /* not JSON */ }
        throw new Error("GET /api/scene: HTTP " + r.status + why);
      }
      apply(await r.json());
      window.__tackroomError = null;
    } catch (e) {
      window.__tackroomError = String(e && e.message || e);
      status.textContent = "error: " + window.__tackroomError;
    }
  })();
  try { await busy; } finally { busy = null; }
  return window.__tackroomRendered;
}
window.__tackroomRefresh = refresh;

async function poll() {
  try {
    const r = await fetch("/api/version", { cache: "no-store" });
    if (r.ok) {
      const v = (await r.json()).version;
      if (v !== drawn) await refresh();
    }
  } catch (e) { /* the server went away: keep trying quietly */ }
  setTimeout(poll, POLL_MS);
}

window.addEventListener("resize", () => { resize(); if (drawn >= 0) renderer.render(scene, camera); });
resize();
refresh().then(() => { if (POLL_MS > 0) setTimeout(poll, POLL_MS); });
