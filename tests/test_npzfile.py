"""The portable file format: round trips, np.load compatibility, atomic writes, and every way a
damaged or hostile file is refused (with the whole message), without ever unpickling."""

import io
import json
import os
import pickle
import struct
import zipfile
import zlib

import ml_dtypes
import numpy as np
import pytest

from subsetsaver import CheckpointNotFoundError, CorruptCheckpointError
from subsetsaver.errors import UnsupportedDtypeError
from subsetsaver.formats import npz as npzfile
from subsetsaver.formats.npz import writer

RNG = np.random.default_rng(7)


def random_array(dtype_name, shape):
    """Random bits of the dtype (NaN payloads included for floats), valid values for bool/int4."""
    dtype = npzfile.numpy_dtype(dtype_name)
    count = int(np.prod(shape))
    if dtype_name == "bool":
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dtype_name in ("int4", "uint4"):
        low, high = (-8, 8) if dtype_name == "int4" else (0, 16)
        return RNG.integers(low, high, size=shape).astype(dtype)
    raw = RNG.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def all_dtype_arrays():
    arrays = {}
    for index, name in enumerate(npzfile.STORED_AS):
        arrays[f"dtypes/{name}"] = random_array(name, (3, index % 4 + 1))
    arrays["shapes/scalar"] = np.float32(2.5)
    arrays["shapes/empty"] = np.zeros((0, 7), np.int16)
    arrays["shapes/rank5"] = random_array("float32", (2, 1, 3, 1, 2))
    return arrays


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("zip64, checksum", [(False, "crc32"), (True, "crc32"), (False, "sha256")])
def test_every_dtype_round_trips_bit_exact(tmp_path, zip64, checksum):
    arrays = all_dtype_arrays()
    path = str(tmp_path / "all.npz")
    written = npzfile.write(path, arrays, selector="everything()", checksum=checksum, _force_zip64=zip64)
    manifest, loaded = npzfile.read(path)
    assert manifest.names == tuple(arrays) == written.names
    for name, array in arrays.items():
        assert same_bits(loaded[name], np.asarray(array)), name
        assert loaded[name].size == 0 or loaded[name].ctypes.data % npzfile.ALIGNMENT == 0
    assert manifest.selector == "everything()" and manifest.checksum == checksum
    assert {len(e.checksum) for e in manifest.arrays} == {npzfile.CHECKSUMS[checksum]}
    assert manifest.entry("dtypes/bfloat16").stored_dtype == "<u2"
    assert loaded["dtypes/bfloat16"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert manifest.entry("shapes/scalar").shape == ()
    assert npzfile.verify(path).names == manifest.names


def test_numpy_opens_the_file_without_pickle(tmp_path):
    arrays = all_dtype_arrays()
    path = str(tmp_path / "all.npz")
    npzfile.write(path, arrays)
    with np.load(path, allow_pickle=False) as opened:
        assert opened.files == [name.replace("/", ".") for name in arrays] + ["__subsetsaver__.json"]
        assert same_bits(opened["dtypes.float64"], arrays["dtypes/float64"])
        assert same_bits(opened["dtypes.bfloat16"], arrays["dtypes/bfloat16"].view(np.uint16))
        manifest = json.loads(opened["__subsetsaver__.json"])
    assert manifest["format"] == "subsetsaver.npz"
    entry = manifest["arrays"][0]
    assert sorted(entry) == ["checksum", "dtype", "member", "name", "nbytes", "shape", "stored_dtype"]
    assert manifest["checksum"] == "crc32"
    assert int(entry["checksum"], 16) == zipfile.ZipFile(path).getinfo("dtypes.float16.npy").CRC
    assert sorted(manifest["versions"]) == ["numpy", "python", "subsetsaver", "tensorflow"]
    assert zipfile.ZipFile(path).testzip() is None  # every CRC-32 right


def test_member_names_are_flat_and_unique(tmp_path):
    arrays = {"a/b": np.zeros(1), "a.b": np.ones(1), "x/..y": np.zeros(2), ".hidden": np.zeros(3)}
    manifest = npzfile.write(str(tmp_path / "n.npz"), arrays)
    assert [e.member for e in manifest.arrays] == ["a.b.npy", "a.b.1.npy", "_2.npy", "_3.npy"]
    _, loaded = npzfile.read(str(tmp_path / "n.npz"))
    assert same_bits(loaded["a.b"], arrays["a.b"]) and same_bits(loaded["x/..y"], arrays["x/..y"])


def test_big_endian_and_strided_arrays_are_written_little_endian_and_contiguous(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "_dtype_names", {})  # a process that has written no little-endian int32 yet
    arrays = {"be": np.arange(6, dtype=">i4").reshape(2, 3), "strided": np.arange(12.0).reshape(3, 4).T}
    manifest = npzfile.write(str(tmp_path / "e.npz"), arrays)
    assert [(e.dtype, e.stored_dtype, e.shape) for e in manifest.arrays] == [("int32", "<i4", (2, 3)),
                                                                           ("float64", "<f8", (4, 3))]
    _, loaded = npzfile.read(str(tmp_path / "e.npz"))
    assert same_bits(loaded["be"], np.arange(6, dtype="<i4").reshape(2, 3))
    assert same_bits(loaded["strided"], np.ascontiguousarray(arrays["strided"]))


def test_ram_filesystem_round_trip():
    arrays = all_dtype_arrays()
    npzfile.write("ram://npzfile_test/model.npz", arrays)
    _, loaded = npzfile.read("ram://npzfile_test/model.npz")
    assert all(same_bits(loaded[n], np.asarray(a)) for n, a in arrays.items())
    import tensorflow as tf

    assert tf.io.gfile.listdir("ram://npzfile_test/") == ["model.npz"]  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = str(tmp_path / "m.npz")
    npzfile.write(path, {"w": np.arange(4.0)})
    before = open(path, "rb").read()
    calls = []

    def failing_add(self, *args):
        calls.append(args[0])
        if len(calls) == 2:
            raise OSError("disk full")
        return original(self, *args)

    original = writer.ZipWriter.add
    monkeypatch.setattr(writer.ZipWriter, "add", failing_add)
    with pytest.raises(OSError, match="disk full"):
        npzfile.write(path, {"w": np.arange(5.0), "b": np.zeros(2)})
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["m.npz"]


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointNotFoundError) as error:
        npzfile.write(str(tmp_path / "nope" / "m.npz"), {"w": np.zeros(1)})
    assert str(error.value) == (f"cannot write '{tmp_path}/nope/m.npz': directory '{tmp_path}/nope' does not exist; "
                                "create it first")


@pytest.mark.parametrize("value, kind", [(np.array([b"ab", b"c"]), "byte strings"),
                                         (np.array([{"a": 1}], dtype=object), "Python objects")])
def test_strings_and_objects_are_refused_at_write(tmp_path, value, kind):
    with pytest.raises(UnsupportedDtypeError) as error:
        npzfile.write(str(tmp_path / "s.npz"), {"name/s": value})
    assert str(error.value) == (
        f"cannot write 'name/s' to a portable checkpoint: it holds {kind}; portable checkpoints hold numeric arrays "
        f"only ({', '.join(npzfile.STORED_AS)}): leave it out of the selection, or use the 'tf' backend"
    )
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------
# Damaged and hostile files
# ---------------------------------------------------------------------------------


@pytest.fixture
def good(tmp_path):
    path = str(tmp_path / "good.npz")
    npzfile.write(path, {"conv/w": np.arange(12, dtype=np.float32).reshape(3, 4), "step": np.int64(7)})
    return path


def members_of(path):
    with zipfile.ZipFile(path) as archive:
        return [(info.filename, archive.read(info.filename)) for info in archive.infolist()]


def rezip(path, members, compression=zipfile.ZIP_STORED):
    """Write ``members`` [(name, bytes)] as a fresh, internally consistent zip (CRCs right)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members:
            archive.writestr(name, data)
    with open(path, "wb") as handle:
        handle.write(buffer.getvalue())


def edit_manifest(path, change):
    members = members_of(path)
    manifest = json.loads(members[-1][1])
    change(manifest)
    members[-1] = (members[-1][0], json.dumps(manifest).encode())
    rezip(path, members)


def refusal(path):
    with pytest.raises(CorruptCheckpointError) as error:
        npzfile.read(path)
    return str(error.value)


def test_truncated_files_are_refused(good):
    data = open(good, "rb").read()
    for cut in (len(data) // 2, len(data) - 1):
        with open(good, "wb") as handle:
            handle.write(data[:cut])
        message = refusal(good)
        assert message.startswith(f"'{good}': not a complete npz archive: its zip directory is missing or damaged (")
        assert message.endswith("); the file is truncated or was not written by subsetsaver; use another checkpoint")


@pytest.mark.parametrize("checksum", ["crc32", "sha256"])
def test_a_flipped_data_byte_fails_the_checksum(good, checksum):
    npzfile.write(good, {"conv/w": np.arange(12, dtype=np.float32).reshape(3, 4), "step": np.int64(7)},
                  checksum=checksum)
    data = bytearray(open(good, "rb").read())
    position = data.index(np.float32(5).tobytes())
    data[position] ^= 0x01
    with open(good, "wb") as handle:
        handle.write(data)
    manifest = npzfile.read_manifest(good)  # the structure is intact: only the data changed
    entry = manifest.entry("conv/w")
    message = refusal(good)
    expected = entry.checksum if checksum == "crc32" else entry.checksum[:16] + "..."
    prefix = f"'{good}', member 'conv.w.npy': checksum mismatch for array 'conv/w' ({checksum} "
    assert message.startswith(prefix)
    assert message.endswith(f", manifest says {expected}): its data was altered or damaged; "
                            "use another checkpoint")


def test_an_edited_manifest_fails_its_crc(good):
    data = bytearray(open(good, "rb").read())
    position = data.index(b'"selector"')
    data[position + 1] = ord("S")
    with open(good, "wb") as handle:
        handle.write(data)
    assert refusal(good) == (f"'{good}', member '__subsetsaver__.json': manifest fails its CRC-32 check: "
                             "it was edited or damaged")


def test_a_rewritten_manifest_with_another_shape_is_caught_before_allocating(good):
    edit_manifest(good, lambda m: m["arrays"][0].update(shape=[10**6, 10**6], nbytes=4 * 10**12))
    assert refusal(good) == (
        f"'{good}', member 'conv.w.npy': holds 176 bytes but the manifest declares array 'conv/w' "
        "[1000000, 1000000] float32 (4000000000000 data bytes + 128 header bytes): truncated or tampered"
    )


def test_a_rewritten_manifest_with_an_inconsistent_size(good):
    edit_manifest(good, lambda m: m["arrays"][0].update(nbytes=12))
    assert refusal(good) == (
        f"'{good}', member '__subsetsaver__.json': manifest array #0 ('conv/w'): nbytes 12 is not what shape "
        "[3, 4] float32 takes (48); the manifest was edited or damaged"
    )


def test_an_object_dtype_in_the_manifest_is_refused(good):
    edit_manifest(good, lambda m: m["arrays"][0].update(dtype="object", stored_dtype="|O"))
    assert refusal(good) == (
        f"'{good}', member '__subsetsaver__.json': manifest array #0 ('conv/w'): dtype 'object' is not allowed "
        f"(allowed: {', '.join(npzfile.STORED_AS)}); the manifest was edited or damaged"
    )


def pickled_object_member():
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"payload": 1}, None], dtype=object), allow_pickle=True)
    return buffer.getvalue()


def test_a_pickled_object_array_is_refused_without_unpickling(good, monkeypatch):
    members = members_of(good)
    payload = pickled_object_member()
    manifest = json.loads(members[-1][1])
    # Make the sizes agree, so only the header tells what the member really is.
    header_length = 128
    manifest["arrays"][0].update(shape=[len(payload) - header_length], dtype="uint8", stored_dtype="|u1",
                                 nbytes=len(payload) - header_length, checksum=f"{zlib.crc32(payload):08x}")
    members[0] = ("conv.w.npy", payload)
    members[-1] = (members[-1][0], json.dumps(manifest).encode())
    rezip(good, members)
    forbid_unpickling(monkeypatch)
    assert refusal(good) == (
        f"'{good}', member 'conv.w.npy': holds a Python object array (dtype object), which only pickle can load; "
        "subsetsaver never unpickles: refused"
    )


def forbid_unpickling(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("something tried to unpickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(np, "load", forbidden)


def test_reading_never_unpickles(good, monkeypatch):
    forbid_unpickling(monkeypatch)
    manifest, arrays = npzfile.read(good)
    assert manifest.names == ("conv/w", "step") and int(arrays["step"]) == 7


@pytest.mark.parametrize(
    "name, problem",
    [
        ("../x.npy", "'..' in the name"),
        ("/abs.npy", "an absolute path"),
        ("C:evil.npy", "an absolute path"),
        ("dir/x.npy", "a path separator in the name"),
        ("dir\\x.npy", "a path separator in the name"),
        ("sp ace.npy", "characters outside A-Z a-z 0-9 _ . - (or longer than 251)"),
        ("run.sh", "not a '.npy' member"),
    ],
)
def test_hostile_member_names_are_refused(good, name, problem):
    members = members_of(good)
    members.insert(1, (name, b"\x93NUMPY"))
    rezip(good, members)
    assert refusal(good) == (f"'{good}', member '{name}': refused member name: {problem}; a portable checkpoint "
                             "holds only flat member names like 'conv_1.w.npy'")


def test_duplicate_members_are_refused(good):
    members = members_of(good)
    members.insert(1, members[0])
    with pytest.warns(UserWarning, match="Duplicate name"):
        rezip(good, members)
    assert refusal(good) == f"'{good}', member 'conv.w.npy': the zip directory lists this member twice"


def test_a_member_the_manifest_does_not_list_is_refused(good):
    members = members_of(good)
    members.insert(1, ("extra.npy", members[0][1]))
    rezip(good, members)
    assert refusal(good) == f"'{good}', member 'extra.npy': unexpected member: the manifest does not list it"


def test_compressed_members_are_refused(good):
    rezip(good, members_of(good), zipfile.ZIP_DEFLATED)
    assert refusal(good) == (f"'{good}', member 'conv.w.npy': compressed (zip method 8); portable checkpoints "
                             "store members uncompressed")


def test_a_plain_numpy_npz_is_not_a_portable_checkpoint(tmp_path):
    path = str(tmp_path / "plain.npz")
    np.savez(path, w=np.zeros(3))
    assert refusal(path) == (f"'{path}': no '__subsetsaver__.json' manifest: not a subsetsaver portable checkpoint "
                             "(plain numpy .npz files lack dtypes and checksums)")


def test_a_local_header_that_disagrees_with_the_directory(good):
    data = bytearray(open(good, "rb").read())
    name_at = 30
    assert data[name_at:name_at + 10] == b"conv.w.npy"
    data[name_at] = ord("k")
    with open(good, "wb") as handle:
        handle.write(data)
    assert refusal(good) == (f"'{good}', member 'conv.w.npy': its local header disagrees with the zip directory "
                             "(name or compression)")


def test_a_version_needed_to_extract_past_zipfiles_is_refused_as_corrupt(good):
    data = bytearray(open(good, "rb").read())
    directory = data.rindex(b"PK\x01\x02")  # the last member's directory entry: its "version needed" at +6
    data[directory + 6:directory + 8] = struct.pack("<H", 131)
    with open(good, "wb") as handle:
        handle.write(data)
    assert refusal(good) == (f"'{good}': its zip directory asks for a reader of zip file version 13.1, which no "
                             "portable checkpoint needs (they are zip 2.0, or 4.5 with zip64); the file was not "
                             "written by subsetsaver or was tampered with; use another checkpoint")


def zip_structure_spans(path):
    """(start, stop) of every zip record of the file at ``path``: local headers with their names and
    extras, and the directory through the end record (the members' data, checked by CRC-32, left out)."""
    with open(path, "rb") as handle, zipfile.ZipFile(handle) as archive:
        spans = []
        for info in archive.infolist():
            handle.seek(info.header_offset + 26)
            name_length, extra_length = struct.unpack("<HH", handle.read(4))
            spans.append((info.header_offset, info.header_offset + 30 + name_length + extra_length))
        return spans + [(archive.start_dir, os.path.getsize(path))]


def test_every_zip_field_a_crafted_file_can_set_is_read_or_refused_as_corrupt(good):
    """Each byte of every zip record set to 0x00, 0xff and its low bit flipped, and each 2 and 4 bytes from it set
    to all ones: the file reads back whole, or is refused with CorruptCheckpointError, never another exception."""
    data = open(good, "rb").read()
    expected = npzfile.read(good)[1]
    spans = zip_structure_spans(good)
    assert sum(stop - start for start, stop in spans) > 200  # three local headers, their directory, the end record
    refused = 0
    for start, stop in spans:
        for at in range(start, stop):
            for value in (b"\x00", b"\xff", bytes([data[at] ^ 1]), b"\xff\xff", b"\xff\xff\xff\xff"):
                crafted = (data[:at] + value + data[at + len(value):])[:len(data)]
                with open(good, "wb") as handle:
                    handle.write(crafted)
                try:
                    arrays = npzfile.read(good)[1]
                except CorruptCheckpointError:
                    refused += 1
                    continue
                assert arrays.keys() == expected.keys(), at
                for name, array in arrays.items():
                    np.testing.assert_array_equal(array, expected[name], err_msg=f"byte {at}")
    assert refused > 1000


def test_a_missing_file(tmp_path):
    with pytest.raises(CheckpointNotFoundError) as error:
        npzfile.read(str(tmp_path / "none.npz"))
    assert str(error.value) == f"no portable checkpoint at '{tmp_path}/none.npz'"


def test_bool_bytes_other_than_zero_and_one_are_refused(tmp_path):
    path = str(tmp_path / "b.npz")
    npzfile.write(path, {"flags": np.array([True, False, True])})
    members = members_of(path)
    raw = bytearray(members[0][1])
    raw[-1] = 2
    manifest = json.loads(members[-1][1])
    manifest["arrays"][0]["checksum"] = f"{zlib.crc32(bytes(raw)):08x}"
    members[0] = (members[0][0], bytes(raw))
    members[-1] = (members[-1][0], json.dumps(manifest).encode())
    rezip(path, members)
    assert refusal(path) == f"'{path}', member 'flags.npy': array 'flags' holds bool bytes other than 0 and 1"


def test_zip64_records_are_written_when_forced(tmp_path):
    path = str(tmp_path / "z.npz")
    npzfile.write(path, {"w": np.arange(3.0)}, _force_zip64=True)
    data = open(path, "rb").read()
    assert struct.pack("<I", 0x06064B50) in data and struct.pack("<I", 0x07064B50) in data
    with np.load(path, allow_pickle=False) as opened:
        assert same_bits(opened["w"], np.arange(3.0))


@pytest.mark.parametrize("zip64", [False, True])
def test_a_large_streamed_array_is_checksummed_as_written_and_its_crc_follows_it(tmp_path, zip64):
    big = RNG.standard_normal((5, 2**17 + 3)).astype(np.float32)  # 2.5 MiB: CRC-32 taken in 1 MiB parts
    small = np.arange(5, dtype=np.int64)
    path = str(tmp_path / "streamed.npz")
    npzfile.write(path, iter([("big", big), ("small", small)]), _force_zip64=zip64)  # a stream, not a mapping
    header = writer.npy_header(writer.STORED_AS["float32"], big.shape)
    crc = zlib.crc32(big.tobytes(), zlib.crc32(header))
    data = open(path, "rb").read()
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None  # the central directory holds each member's true CRC-32
        big_info, small_info = archive.getinfo("big.npy"), archive.getinfo("small.npy")
    assert (big_info.flag_bits, big_info.CRC, small_info.flag_bits) == (0x08, crc, 0)
    flags, local_crc = struct.unpack_from("<HxxxxxxI", data, big_info.header_offset + 6)
    assert (flags, local_crc) == (0x08, 0)  # the local header: CRC follows the data
    name_length, extra_length = struct.unpack_from("<HH", data, big_info.header_offset + 26)
    end = big_info.header_offset + 30 + name_length + extra_length + big_info.file_size
    size = big_info.file_size
    descriptor = struct.pack("<IIQQ", 0x08074B50, crc, size, size) if zip64 else struct.pack(
        "<IIII", 0x08074B50, crc, size, size)
    assert data[end:end + len(descriptor)] == descriptor
    small_crc = struct.unpack_from("<I", data, small_info.header_offset + 14)[0]
    assert small_crc == small_info.CRC  # a small array's CRC-32, known first, is in its local header
    manifest, arrays = npzfile.read(path)
    assert manifest.entry("big").checksum == f"{crc:08x}"
    assert same_bits(arrays["big"], big) and same_bits(arrays["small"], small)
    with np.load(path, allow_pickle=False) as opened:
        assert same_bits(opened["big"], big) and same_bits(opened["small"], small)


def test_a_file_changed_after_a_validated_read_is_validated_again(good):
    npzfile.read(good)  # validated once; later opens of the unchanged file reuse that
    data = bytearray(open(good, "rb").read())
    position = data.index(b'"selector"')
    data[position + 1] = ord("S")  # same size, maybe even the same timestamps
    with open(good, "wb") as handle:
        handle.write(data)
    assert refusal(good) == (f"'{good}', member '__subsetsaver__.json': manifest fails its CRC-32 check: "
                             "it was edited or damaged")


def test_a_manifest_checksum_that_is_not_the_members_crc(good):
    edit_manifest(good, lambda m: m["arrays"][1].update(checksum="00000000"))
    crc = zipfile.ZipFile(good).getinfo("step.npy").CRC
    assert refusal(good) == (
        f"'{good}', member '__subsetsaver__.json': array 'step': checksum 00000000 is not the zip directory's "
        f"CRC-32 {crc:08x} of member 'step.npy'; the manifest was edited or damaged"
    )


@pytest.mark.parametrize("name, problem", [
    ("", "an empty name"),
    ("../conv/w", "a '..' part"),
    ("conv/./w", "a '.' part"),
    ("/conv/w", "an empty part (a leading, trailing or doubled '/')"),
    ("conv\nw", "a control character"),
])
def test_a_manifest_array_name_that_no_variable_can_have_is_refused(good, name, problem):
    """Crafted names with every CRC right: refused by the reader (and the writer) with the cause."""
    edit_manifest(good, lambda m: m["arrays"][0].update(name=name))
    assert refusal(good) == (f"'{good}', member '__subsetsaver__.json': manifest array #0 has the name {name!r}: "
                             f"{problem}; the manifest was edited or damaged")
    with pytest.raises(ValueError) as error:
        npzfile.write(good, {name: np.zeros(2, np.float32)})
    assert str(error.value) == (f"cannot write an array named {name!r}: {problem}; name it as a TensorFlow "
                                "variable ('scope/name')")


def test_a_manifest_naming_one_array_twice_is_refused(good):
    edit_manifest(good, lambda m: m["arrays"][1].update(name=m["arrays"][0]["name"]))
    assert refusal(good) == (f"'{good}', member '__subsetsaver__.json': manifest lists array 'conv/w' twice; "
                             "the manifest was edited or damaged")


def test_entries_copied_with_checksums_equal_entries_made_whole():
    import dataclasses

    from subsetsaver.formats.npz.format import entries_with_checksums

    templates = [npzfile.ArrayEntry(f"a/{i}", f"a.{i}.npy", (2,), "float32", "<f4", 8, "", {}) for i in range(3)]
    copies = entries_with_checksums(templates, ["0badf00d", "00000000", "ffffffff"])
    assert copies == [dataclasses.replace(t, checksum=c) for t, c in zip(templates, ["0badf00d", "00000000", "ffffffff"])]
    assert all(type(c) is npzfile.ArrayEntry for c in copies) and templates[0].checksum == ""
    assert len({id(c.info) for c in copies} | {id(t.info) for t in templates}) == 6  # no info dict shared
    with pytest.raises(dataclasses.FrozenInstanceError):
        copies[0].checksum = "12345678"
