%% @doc Helpers for the declarative specifications of CRDT types (test/hm_spec_TYPE.erl).
%%
%% A history is a list of items `{Id, Replica, Op, Past}': operation `Op' (as the caller passed
%% it to hm_crdt:mutate/3) issued at `Replica', where `Past' is the set of ids of every
%% operation that happened before it (transitively closed). A spec module exports
%% `gen_op/0' (a PropEr generator of the type's operations over a small domain, so that
%% conflicts are frequent) and `spec(History)' (the value every replica must show once it has
%% seen the whole history), computed from the operations and happened-before alone, never from
%% the implementation.
-module(hm_spec).

-export([before/2, maximal/1, concurrent/2, spec_module/1]).
-export_type([item/0, history/0]).

-type item() :: {Id :: pos_integer(), Replica :: term(), Op :: term(), Past :: sets:set()}.
-type history() :: [item()].

%% @doc `A' happened before `B'.
-spec before(item(), item()) -> boolean().
before({IdA, _, _, _}, {_, _, _, PastB}) -> sets:is_element(IdA, PastB).

%% @doc Neither happened before the other (and they are different operations).
-spec concurrent(item(), item()) -> boolean().
concurrent(A, B) -> A =/= B andalso not before(A, B) andalso not before(B, A).

%% @doc The items no other item of the list happened after.
-spec maximal(history()) -> history().
maximal(Items) -> [X || X <- Items, not lists:any(fun(Y) -> before(X, Y) end, Items)].

%% @doc The spec module of a type.
-spec spec_module(atom()) -> module().
spec_module(Type) -> list_to_atom("hm_spec_" ++ atom_to_list(Type)).
