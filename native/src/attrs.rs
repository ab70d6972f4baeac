//! Reading `key`, `value`, `timestamp` off a batch's records without a full
//! attribute lookup per record and name: resolved once per batch for the records'
//! type, exactly as `PyObject_GenericGetAttr` would resolve them.
//!
//! * a `__slots__` member (streamremat's `Record`): the object at its offset;
//! * no attribute of that name anywhere in the type's MRO and an instance dict
//!   (aiokafka's `ConsumerRecord`, a plain dataclass): the instance dict's entry;
//! * anything else (a property, a class attribute, a type with its own
//!   `__getattribute__`, a record of another type): `getattr`.

use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};

#[derive(Clone, Copy)]
enum Access {
    Generic,
    Slot(ffi::Py_ssize_t),
    Dict,
}

/// How the attributes of records of one type are read.
pub struct Reader<'py> {
    ty: *mut ffi::PyTypeObject,
    names: Vec<Bound<'py, PyString>>,
    access: Vec<Access>,
    uses_dict: bool,
}

fn resolve(ty: &Bound<'_, PyType>, name: &Bound<'_, PyString>) -> PyResult<Access> {
    let t = ty.as_type_ptr();
    // SAFETY: `t` is a live type object (held by `ty`).
    unsafe {
        // (a type whose getattr is not the generic one may not match: then
        // Generic, which is only slower)
        let generic = ffi::PyObject_GenericGetAttr as usize;
        if (*t).tp_getattro.map(|f| f as usize) != Some(generic) {
            return Ok(Access::Generic);
        }
    }
    let mro = ty.getattr("__mro__")?.cast_into::<PyTuple>()?;
    for base in mro.iter() {
        let found = base.getattr("__dict__")?.get_item(name).ok();
        let Some(found) = found else { continue };
        // SAFETY: reading the type and, for a member descriptor, its member
        // definition (static for the type's lifetime), as CPython's own lookup does.
        unsafe {
            let d = found.as_ptr();
            if ffi::Py_TYPE(d) == ptr::addr_of_mut!(ffi::PyMemberDescr_Type) {
                let member = (*(d as *mut ffi::PyMemberDescrObject)).d_member;
                if (*member).type_code == ffi::Py_T_OBJECT_EX
                    && (*member).flags & ffi::Py_AUDIT_READ == 0
                {
                    return Ok(Access::Slot((*member).offset));
                }
            }
        }
        return Ok(Access::Generic);
    }
    // SAFETY: as above.
    let has_dict = unsafe { (*t).tp_dictoffset != 0 };
    Ok(if has_dict { Access::Dict } else { Access::Generic })
}

impl<'py> Reader<'py> {
    /// A reader of `names` for records of `first`'s type.
    pub fn new(first: &Bound<'py, PyAny>, names: Vec<Bound<'py, PyString>>) -> PyResult<Self> {
        let ty = first.get_type();
        let access = names.iter().map(|n| resolve(&ty, n)).collect::<PyResult<Vec<_>>>()?;
        let uses_dict = access.iter().any(|a| matches!(a, Access::Dict));
        Ok(Reader { ty: ty.as_type_ptr(), names, access, uses_dict })
    }

    /// The attributes of `r`, in the order of the names (an error where `getattr`
    /// raises).
    #[inline]
    pub fn read(&self, r: &Bound<'py, PyAny>, out: &mut Vec<Bound<'py, PyAny>>) -> PyResult<()> {
        out.clear();
        let py = r.py();
        let p = r.as_ptr();
        // SAFETY: `p` is a live object; Py_TYPE reads its header.
        if unsafe { ffi::Py_TYPE(p) } != self.ty {
            for n in &self.names {
                out.push(r.getattr(n)?);
            }
            return Ok(());
        }
        let dict = if self.uses_dict {
            // SAFETY: a new reference to the instance dict (created if absent), or NULL
            // with an exception set.
            let d = unsafe { ffi::PyObject_GenericGetDict(p, ptr::null_mut()) };
            Some(unsafe { Bound::from_owned_ptr_or_err(py, d)? }.cast_into::<PyDict>()?)
        } else {
            None
        };
        for (n, a) in self.names.iter().zip(&self.access) {
            let got = match a {
                Access::Slot(offset) => {
                    // SAFETY: records of this type hold an object pointer (or NULL when
                    // unset) at the member's offset.
                    let v = unsafe { *((p as *mut u8).offset(*offset) as *mut *mut ffi::PyObject) };
                    if v.is_null() {
                        r.getattr(n)? // raises AttributeError, as getattr would
                    } else {
                        // SAFETY: a live object the record holds; we take a new reference.
                        unsafe { Bound::from_borrowed_ptr(py, v) }
                    }
                }
                Access::Dict => match dict.as_ref().and_then(|d| d.get_item(n).ok().flatten()) {
                    Some(v) => v,
                    None => r.getattr(n)?,
                },
                Access::Generic => r.getattr(n)?,
            };
            out.push(got);
        }
        Ok(())
    }
}
