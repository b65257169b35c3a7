%% @doc CRDT tables write behind (the ChiaVe paper, *ChiaVe: A Flexible CRDT-Based Key-Value
%% Store*, §4: a store's state per broadcast epoch): a key's CRDT, once an update changed it
%% here, stays in the copy's state, and its row is written when the epoch ends; the updates
%% of a state or delta table's epoch leave together. Part of the per-table core
%% ({@link hm_ec_table}); pure.
%%
%% A row's write copies the whole CRDT into ETS and its read copies it out, so writing every
%% update made building a large value one update at a time cost time quadratic in its size;
%% held here, an update costs what the CRDT's own update costs. The key is marked in the
%% store meanwhile ({@link hm_ec_store:unwritten_put/2}) for readers outside the table's
%% process.
%%
%% Invariants: a key's row lags its state by at most one epoch; a key marked unwritten has
%% its state here; a disc copy logs an epoch's updates until they are sent.
-module(hm_ec_table_write_behind).
-include("hm_ec_table.hrl").

-export([batch/5, epoch_timer/1, crdt_state/2, crdt_put/3, write_unwritten/1, crdt_meta/3]).

%% A state or delta CRDT table (ChiaVe's broadcast epoch): the update is applied here at
%% once, and the updates of an epoch leave together, as one message of the table's
%% broadcast, when it ends (for `state', only the last state of each key). A disc copy
%% logs them until then, so a restart sends them, and applies them here again
%% (hm_ec_table_restore:replay/3).
-spec batch(term(), term(), hm_crdt:crdt(), term(), #t{}) -> {#t{}, effects()}.
batch(Key, Payload, C1, From, T = #t{batch = Bt, store = St}) ->
    Bt1 = [{Key, Payload} | Bt],
    St1 = case hm_ec_store:is_disc(St) of
              true -> hm_ec_store:log_put(crdt_batch, Bt1, St);
              false -> St
          end,
    {crdt_put(Key, C1, T#t{batch = Bt1, store = St1}), [{reply, From, ok}]}.

%% A CRDT table's epoch timer is set while it has updates to send or rows to write.
-spec epoch_timer({#t{}, effects()}) -> {#t{}, effects()}.
epoch_timer({T = #t{epoch_set = false, batch = Bt, unwritten = U, epoch = Ms}, Effs})
  when Bt =/= []; map_size(U) > 0 ->
    {T#t{epoch_set = true}, Effs ++ [{timer, Ms, crdt_epoch}]};
epoch_timer(Result) -> Result.

%% A CRDT table's key: its state in memory when its row lacks updates, else its row's CRDT,
%% else a new one.
-spec crdt_state(term(), #t{}) -> hm_crdt:crdt().
crdt_state(Key, #t{crdt = Spec, store = St, unwritten = U}) ->
    case U of
        #{Key := C} -> C;
        _ -> case hm_ec_store:read(Key, St) of
                 [{_, _, C}] -> C;
                 _ -> hm_ec_crdt:new(Spec)
             end
    end.

%% Write-behind: a CRDT table's key's new state stays in memory, its row written when the
%% epoch ends (write_unwritten/1). An update copies nothing: a row's write copies the whole
%% state into ETS, as its read copies it out, so writing every update made building a large
%% value one update at a time cost time quadratic in its size. The key is marked in the
%% store before the update is answered, for readers outside the table's process.
-spec crdt_put(term(), hm_crdt:crdt(), #t{}) -> #t{}.
crdt_put(Key, C, T = #t{unwritten = U, store = St}) ->
    case U of
        #{Key := _} -> T#t{unwritten = U#{Key := C}};
        _ -> T#t{unwritten = U#{Key => C}, store = hm_ec_store:unwritten_put(Key, St)}
    end.

%% The rows of the keys held in memory are written (and their marks cleared once written).
%% A key left with timestamps to fold gets its metadata row before its row, so a crash that
%% keeps the row keeps the metadata row stabilization looks for too.
-spec write_unwritten(#t{}) -> #t{}.
write_unwritten(T = #t{unwritten = U}) when map_size(U) =:= 0 -> T;
write_unwritten(T = #t{unwritten = U, store = St0, record = {Name, _}}) ->
    %% (whether the key holds timestamps is asked once: for a large op-flavor value it
    %% counts every element's timestamps)
    St = maps:fold(fun(Key, C, St) ->
                           Row = {Name, Key, C},
                           St1 = case hm_ec_crdt:is_unstable(C) of
                                     true ->
                                         hm_ec_store:write(
                                           Row, hm_ec_store:meta_put(Key, hm_ec_key:new(), St));
                                     false ->
                                         hm_ec_store:meta_del(Key, hm_ec_store:write(Row, St))
                                 end,
                           hm_ec_store:unwritten_del(Key, St1)
                   end, St0, U),
    T#t{unwritten = #{}, store = St}.

%% A CRDT table keeps a metadata row (an empty key state: a marker) for the keys stability
%% has yet to compact.
-spec crdt_meta(term(), hm_crdt:crdt(), hm_ec_store:store()) -> hm_ec_store:store().
crdt_meta(Key, C, St) ->
    case hm_ec_crdt:is_unstable(C) of
        true -> hm_ec_store:meta_put(Key, hm_ec_key:new(), St);
        false -> hm_ec_store:meta_del(Key, St)
    end.
