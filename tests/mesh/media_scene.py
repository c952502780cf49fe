"""A scene that reads a font, a sound and a volume cache from files, built with bpy in a child
process: `python -m tests.mesh.media_scene FOLDER FONT` writes FOLDER/media.blend reading

- FOLDER/fonts/title.ttf (a copy of FONT) for a text object, by `//fonts/title.ttf`,
- FOLDER/audio/hit.wav (a short tone written here) for a speaker, by `//audio/hit.wav`,
- FOLDER/cache/smoke_0001.vdb to smoke_0003.vdb as a volume sequence, by `//cache/smoke_0001.vdb`.

Tracing reads paths, not contents: the volume files hold placeholder bytes.
"""

from __future__ import annotations

import shutil
import struct
import sys
import wave
from pathlib import Path

FILES = ("fonts/title.ttf", "audio/hit.wav", "cache/smoke_0001.vdb", "cache/smoke_0002.vdb",
         "cache/smoke_0003.vdb")


def build(folder: Path, font: Path) -> Path:
    import bpy

    (folder / "fonts").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(font, folder / "fonts/title.ttf")
    (folder / "audio").mkdir(exist_ok=True)
    with wave.open(str(folder / "audio/hit.wav"), "wb") as tone:
        tone.setnchannels(1)
        tone.setsampwidth(2)
        tone.setframerate(8000)
        tone.writeframes(b"".join(struct.pack("<h", (i % 40 - 20) * 800) for i in range(800)))
    (folder / "cache").mkdir(exist_ok=True)
    for frame in (1, 2, 3):
        (folder / f"cache/smoke_{frame:04d}.vdb").write_bytes(b"vdb frame %d" % frame)

    bpy.ops.wm.read_factory_settings(use_empty=True)
    blend = folder / "media.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    text = bpy.data.curves.new("Title", "FONT")
    text.font = bpy.data.fonts.load("//fonts/title.ttf")
    bpy.context.scene.collection.objects.link(bpy.data.objects.new("Title", text))
    speaker = bpy.data.speakers.new("Hit")
    speaker.sound = bpy.data.sounds.load("//audio/hit.wav")
    bpy.context.scene.collection.objects.link(bpy.data.objects.new("Hit", speaker))
    volume = bpy.data.volumes.new("Smoke")
    volume.filepath = "//cache/smoke_0001.vdb"
    volume.is_sequence, volume.frame_duration = True, 3
    bpy.context.scene.collection.objects.link(bpy.data.objects.new("Smoke", volume))
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    return blend


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
