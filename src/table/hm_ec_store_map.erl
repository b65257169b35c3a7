%% @doc An EC table's storage in maps ({@link hm_ec_store}): what the simulator and the
%% properties run the per-table core on. Pure.
%%
%% `rows' holds `Key => [Record]' (one for a `set', the siblings of a `bag', in insertion
%% order), `meta' `Key => KeyState', `dlog' the durable log of a `disc' store (empty and
%% unused for `ram'). {@link durable/1} is what survives a crash: everything of a disc store,
%% nothing of a ram one.
-module(hm_ec_store_map).
-behaviour(hm_ec_store).

-export([new/2, durable/1, rows_map/1, meta_map/1]).
-export([read/2, write/2, delete/2, all_keys/1, rows/1, size/1,
         meta_get/2, meta_put/3, meta_del/2, meta_keys/1, meta_rows/1, meta_size/1,
         meta_words/1, log_put/3, log_del/2, log_read/1, log_clear/1, is_disc/1]).
-export_type([state/0]).

-type state() :: #{type := set | bag, disc := boolean(), rows := #{term() => [tuple()]},
                   meta := #{term() => hm_ec_key:key_state()}, dlog := map()}.

%% @doc An empty store: `set' or `bag', `ram' or `disc'.
-spec new(set | bag, ram | disc) -> hm_ec_store:store().
new(Type, Storage) ->
    {?MODULE, #{type => Type, disc => Storage =:= disc, rows => #{}, meta => #{}, dlog => #{}}}.

%% @doc What survives a crash: the whole store on disc, `none' for ram.
-spec durable(hm_ec_store:store()) -> hm_ec_store:store() | none.
durable({?MODULE, #{disc := true}} = St) -> St;
durable({?MODULE, _}) -> none.

%% @doc What reads show, as `Key => [Record]'.
-spec rows_map(hm_ec_store:store()) -> #{term() => [tuple()]}.
rows_map({?MODULE, #{rows := R}}) -> R.

-spec meta_map(hm_ec_store:store()) -> #{term() => hm_ec_key:key_state()}.
meta_map({?MODULE, #{meta := M}}) -> M.

-spec read(term(), state()) -> [tuple()].
read(Key, #{rows := R}) -> maps:get(Key, R, []).

-spec write(tuple(), state()) -> state().
write(Rec, S = #{type := set, rows := R}) -> S#{rows := R#{element(2, Rec) => [Rec]}};
write(Rec, S = #{type := bag, rows := R}) ->
    K = element(2, Rec),
    Old = maps:get(K, R, []),
    S#{rows := R#{K => (Old -- [Rec]) ++ [Rec]}}.

-spec delete(term(), state()) -> state().
delete(Key, S = #{rows := R}) -> S#{rows := maps:remove(Key, R)}.

-spec all_keys(state()) -> [term()].
all_keys(#{rows := R}) -> maps:keys(R).

-spec rows(state()) -> [tuple()].
rows(#{rows := R}) -> lists:append(maps:values(R)).

-spec size(state()) -> non_neg_integer().
size(#{rows := R}) -> maps:fold(fun(_, Rs, N) -> N + length(Rs) end, 0, R).

-spec meta_get(term(), state()) -> {ok, hm_ec_key:key_state()} | none.
meta_get(Key, #{meta := M}) ->
    case M of
        #{Key := KS} -> {ok, KS};
        _ -> none
    end.

-spec meta_put(term(), hm_ec_key:key_state(), state()) -> state().
meta_put(Key, KS, S = #{meta := M}) -> S#{meta := M#{Key => KS}}.

-spec meta_del(term(), state()) -> state().
meta_del(Key, S = #{meta := M}) -> S#{meta := maps:remove(Key, M)}.

-spec meta_keys(state()) -> [term()].
meta_keys(#{meta := M}) -> maps:keys(M).

-spec meta_rows(state()) -> [{term(), hm_ec_key:key_state()}].
meta_rows(#{meta := M}) -> maps:to_list(M).

-spec meta_size(state()) -> non_neg_integer().
meta_size(#{meta := M}) -> map_size(M).

-spec meta_words(state()) -> non_neg_integer().
meta_words(#{meta := M}) -> erts_debug:flat_size(M).

-spec log_put(term(), term(), state()) -> state().
log_put(K, V, S = #{disc := true, dlog := D}) -> S#{dlog := D#{K => V}};
log_put(_, _, S) -> S.

-spec log_del(term(), state()) -> state().
log_del(K, S = #{dlog := D}) -> S#{dlog := maps:remove(K, D)}.

-spec log_read(state()) -> [{term(), term()}].
log_read(#{dlog := D}) -> maps:to_list(D).

-spec log_clear(state()) -> state().
log_clear(S) -> S#{dlog := #{}}.

-spec is_disc(state()) -> boolean().
is_disc(#{disc := D}) -> D.
